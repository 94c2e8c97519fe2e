//! `syncguard status`: the live lock on a key (with its shared holders, the key's semaphore
//! and the waiters in line) or held under a lock id, and, while a break's marker keeps the
//! key, who broke it, why, when and until when.

use serde_json::{Value, json};
use syncguard::observe::Kind;
use syncguard::{
    ErrorCode, LeaseKind, LockBackend, LockError, LockInfoDebug, get_by_id_raw, get_by_key_raw,
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
/// The leases are read raw, so that a break's marker is known by its lock id, and shown
/// sanitised unless `raw`.
fn shown(
    backend: &dyn LockBackend,
    key: Option<&str>,
    lock_id: Option<&str>,
    raw: bool,
) -> syncguard::Result<Outcome> {
    let (found, permits, readers) = match (key, lock_id) {
        (Some(key), _) => (
            get_by_key_raw(backend, key)?,
            unless_refused(backend.holders_raw(key, LeaseKind::Permit))?,
            unless_refused(backend.holders_raw(key, LeaseKind::Shared))?,
        ),
        // Permits and shared holds are found by their key: a lock id alone names locks only.
        (None, Some(id)) => (get_by_id_raw(backend, id)?, Vec::new(), Vec::new()),
        (None, None) => {
            return Err(LockError::invalid_argument(
                "status needs --key or --lock-id",
            ));
        }
    };
    let live = found.is_some() || !permits.is_empty() || !readers.is_empty();
    let broken = break_shown(
        (found.iter().map(|lease| (Kind::Lock, lease)))
            .chain(readers.iter().map(|lease| (Kind::Shared, lease)))
            .chain(permits.iter().map(|lease| (Kind::Permit, lease))),
    );
    let view = |lease: &LockInfoDebug| match raw {
        true => json!(lease),
        false => json!(lease.info),
    };
    let (waiters, permit_waiters) = match key {
        Some(key) => (
            json_values(&unless_refused(backend.waiters(key, LeaseKind::Lock))?),
            json_values(&unless_refused(backend.waiters(key, LeaseKind::Permit))?),
        ),
        None => (Vec::new(), Vec::new()),
    };
    let shown = with_extras(
        found.as_ref().map(view),
        [
            ("readers", readers.iter().map(view).collect()),
            ("permits", permits.iter().map(view).collect()),
            ("waiters", waiters),
            ("permitWaiters", permit_waiters),
        ],
    );
    Ok(Outcome::Printed(with_break(shown, broken), u8::from(!live)))
}

/// The permits or waiters `status` shows beside the lock: none where the store keeps no
/// semaphores. `InvalidArgument` here, for a key the lock lookup accepted, is the store
/// refusing semaphores (a backend without them, PostgreSQL tables without this version's
/// semaphore functions): a store that cannot hold a permit has no holders, and the lock's
/// status stands.
fn unless_refused<T>(holders: syncguard::Result<Vec<T>>) -> syncguard::Result<Vec<T>> {
    match holders {
        Ok(holders) => Ok(holders),
        Err(error) if error.code() == ErrorCode::InvalidArgument => Ok(Vec::new()),
        Err(error) => Err(error),
    }
}

/// `"broken"`: the latest break whose marker still lives among `leases` — what it broke, by
/// whom, why, when and until when the key is kept — or `None` when no marker lives.
fn break_shown<'a>(leases: impl Iterator<Item = (Kind, &'a LockInfoDebug)>) -> Option<Value> {
    let (kind, marker, note) = leases
        .filter_map(|(kind, lease)| Some((kind, lease, lease.break_note()?)))
        .max_by_key(|(_, lease, _)| (lease.info.acquired_at_ms, lease.info.expires_at_ms))?;
    Some(json!({
        "kind": kind.as_str(),
        "by": note.by,
        "reason": note.reason,
        "atMs": marker.info.acquired_at_ms,
        "untilMs": marker.info.expires_at_ms,
    }))
}

/// `shown` with `"broken"` added while a break's marker lives (status is then an object: a
/// marker is a live lease).
fn with_break(shown: Value, broken: Option<Value>) -> Value {
    match (shown, broken) {
        (Value::Object(mut fields), Some(broken)) => {
            fields.insert("broken".to_owned(), broken);
            Value::Object(fields)
        }
        (shown, _) => shown,
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
    fn a_live_marker_shows_who_broke_the_key_and_until_when() {
        use syncguard::Fence;
        use syncguard::driver::{BreakNote, marker_lock_id};
        let lease = |lock_id: String, holder: &str, at: i64| {
            LockInfoDebug::new(
                "k",
                lock_id,
                at + 5_000,
                at,
                Fence::from_counter(3).unwrap(),
            )
            .with_holder(Some(holder.to_owned()))
        };
        let note = BreakNote::new("ops-1:77 syncguard", Some("hung".to_owned()));
        let note = note.to_holder().unwrap();
        let (older, newer) = (
            lease(marker_lock_id().into_string(), note.as_str(), 1_000),
            lease(marker_lock_id().into_string(), "broken by someone", 2_000),
        );
        let worker = lease("A".repeat(22), "broken by a worker's own text", 3_000);
        assert_eq!(break_shown([(Kind::Lock, &worker)].into_iter()), None);
        assert_eq!(
            break_shown([(Kind::Lock, &older), (Kind::Permit, &worker)].into_iter()),
            Some(json!({
                "kind": "lock", "by": "ops-1:77 syncguard", "reason": "hung",
                "atMs": 1_000, "untilMs": 6_000,
            }))
        );
        let latest = break_shown([(Kind::Shared, &older), (Kind::Permit, &newer)].into_iter());
        assert_eq!(
            latest.as_ref().map(|b| b["kind"].clone()),
            Some(json!("permit"))
        );
        assert_eq!(
            latest.as_ref().map(|b| b["reason"].clone()),
            Some(Value::Null)
        );
        let shown = with_break(json!({ "fence": "000000000000003" }), latest.clone());
        assert_eq!(shown["broken"], latest.unwrap());
        assert_eq!(with_break(Value::Null, None), Value::Null);
    }

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
