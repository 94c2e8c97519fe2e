//! `syncguard status`: the live lock on a key (with its shared holders, the key's semaphore
//! and the waiters in line) or held under a lock id.

use serde_json::{Value, json};
use syncguard::{
    ErrorCode, LeaseKind, LockBackend, LockError, get_by_id, get_by_id_raw, get_by_key,
    get_by_key_raw,
};

use crate::input;
use crate::outcome::{Outcome, json_values};

/// `status`: `--key` or `--lock-id` checked first, then looked up.
pub fn status(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    key: Option<&str>,
    lock_id: Option<&str>,
    raw: bool,
) -> syncguard::Result<Outcome> {
    key.map(input::key).transpose()?;
    lock_id.map(input::lock_id).transpose()?;
    shown(connect()?.as_ref(), key, lock_id, raw)
}

/// What `status` prints for `key` or `lock_id`, and its exit code: 1 when nothing is held.
fn shown(
    backend: &dyn LockBackend,
    key: Option<&str>,
    lock_id: Option<&str>,
    raw: bool,
) -> syncguard::Result<Outcome> {
    let (found, permits, readers): (Option<Value>, Vec<Value>, Vec<Value>) =
        match (key, lock_id, raw) {
            (Some(key), _, false) => (
                get_by_key(backend, key)?.map(|info| json!(info)),
                shown_unless_refused(backend.holders(key, LeaseKind::Permit))?,
                shown_unless_refused(backend.holders(key, LeaseKind::Shared))?,
            ),
            (Some(key), _, true) => (
                get_by_key_raw(backend, key)?.map(|info| json!(info)),
                shown_unless_refused(backend.holders_raw(key, LeaseKind::Permit))?,
                shown_unless_refused(backend.holders_raw(key, LeaseKind::Shared))?,
            ),
            // Permits and shared holds are found by their key: a lock id alone names locks only.
            (None, Some(id), false) => (
                get_by_id(backend, id)?.map(|info| json!(info)),
                Vec::new(),
                Vec::new(),
            ),
            (None, Some(id), true) => (
                get_by_id_raw(backend, id)?.map(|info| json!(info)),
                Vec::new(),
                Vec::new(),
            ),
            (None, None, _) => {
                return Err(LockError::invalid_argument(
                    "status needs --key or --lock-id",
                ));
            }
        };
    let live = found.is_some() || !permits.is_empty() || !readers.is_empty();
    let (waiters, permit_waiters) = match key {
        Some(key) => (
            shown_unless_refused(backend.waiters(key, LeaseKind::Lock))?,
            shown_unless_refused(backend.waiters(key, LeaseKind::Permit))?,
        ),
        None => (Vec::new(), Vec::new()),
    };
    let shown = with_extras(
        found,
        [
            ("readers", readers),
            ("permits", permits),
            ("waiters", waiters),
            ("permitWaiters", permit_waiters),
        ],
    );
    Ok(Outcome::Printed(shown, u8::from(!live)))
}

/// The permits or waiters `status` shows beside the lock: none where the store keeps no
/// semaphores. `InvalidArgument` here, for a key the lock lookup accepted, is the store
/// refusing semaphores (a backend without them, PostgreSQL tables without this version's
/// semaphore functions): a store that cannot hold a permit has no holders, and the lock's
/// status stands.
fn shown_unless_refused<T: serde::Serialize>(
    holders: syncguard::Result<Vec<T>>,
) -> syncguard::Result<Vec<Value>> {
    match holders {
        Ok(holders) => Ok(json_values(&holders)),
        Err(error) if error.code() == ErrorCode::InvalidArgument => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// What `status` prints: the lock's object as before, with each of `extras` (`"permits"`, the
/// semaphore's holders; `"waiters"` and `"permitWaiters"`, the lock's and the semaphore's lines)
/// added only when it has entries, so that the output for a key nobody else uses is unchanged
/// (and stays what `list` prints for it); `{"permits":[…]}` alone when only the semaphore is
/// held; `null` when nothing is.
fn with_extras<const N: usize>(lock: Option<Value>, extras: [(&str, Vec<Value>); N]) -> Value {
    if extras.iter().all(|(_, values)| values.is_empty()) {
        return lock.unwrap_or(Value::Null);
    }
    let mut shown = match lock {
        Some(Value::Object(fields)) => fields,
        // A lock's info always serialises to an object; anything else is kept under a name
        // rather than lost.
        Some(other) => serde_json::Map::from_iter([("lock".to_owned(), other)]),
        None => serde_json::Map::new(),
    };
    for (name, values) in extras {
        if !values.is_empty() {
            shown.insert(name.to_owned(), Value::Array(values));
        }
    }
    Value::Object(shown)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_adds_permits_and_waiters_only_when_there_are_any() {
        let with_permits = |lock, permits| with_extras(lock, [("permits", permits)]);
        let lock = json!({ "fence": "000000000000001" });
        assert_eq!(with_permits(None, Vec::new()), Value::Null);
        assert_eq!(with_permits(Some(lock.clone()), Vec::new()), lock);
        let permit = json!({ "fence": "000000000000002" });
        assert_eq!(
            with_permits(Some(lock.clone()), vec![permit.clone()]),
            json!({ "fence": "000000000000001", "permits": [permit.clone()] })
        );
        assert_eq!(
            with_permits(None, vec![permit.clone()]),
            json!({ "permits": [permit] })
        );
        let waiter = json!({ "holder": "host:1 job" });
        assert_eq!(
            with_extras(
                Some(lock),
                [("permits", Vec::new()), ("waiters", vec![waiter.clone()])]
            ),
            json!({ "fence": "000000000000001", "waiters": [waiter] })
        );
    }
}
