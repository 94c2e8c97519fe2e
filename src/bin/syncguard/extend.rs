//! `syncguard extend`: sets leases (or a permit, or a shared hold) that `acquire` took to
//! expire `--ttl` from now.

use std::time::Duration;

use serde_json::json;
use syncguard::LockBackend;

use crate::args::{LockIdArgs, PermitOf};
use crate::input;
use crate::lock_ids::several_answered;
use crate::outcome::Outcome;

/// `extend`: the ids, `--ttl` and `--key` checked first, then each lease extended, every one
/// tried.
pub fn extend(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    ids: LockIdArgs,
    ttl: Duration,
    permit: &PermitOf,
) -> syncguard::Result<Outcome> {
    let ids = ids.checked()?;
    input::ttl(ttl)?;
    permit.check()?;
    let backend = connect()?;
    let extend = |id: &str| extended(permit, backend.as_ref(), id, ttl);
    if let Some(id) = ids.single() {
        return Ok(match extend(id)? {
            Some(expires_at_ms) => {
                Outcome::Printed(json!({ "ok": true, "expiresAtMs": expires_at_ms }), 0)
            }
            None => Outcome::Printed(json!({ "ok": false }), 1),
        });
    }
    let (expiries, not_held) = ids.each("extended", extend)?;
    // The set lasts as long as its earliest lease.
    let earliest = expiries.into_iter().min();
    Ok(several_answered(
        json!({ "ok": true, "expiresAtMs": earliest }),
        not_held,
    ))
}

/// Extends the lease `lock_id` names (a permit's or a shared hold's with `--key`) by `ttl`: its
/// new expiry, if it was live.
fn extended(
    permit: &PermitOf,
    backend: &dyn LockBackend,
    lock_id: &str,
    ttl: Duration,
) -> syncguard::Result<Option<i64>> {
    match permit.key.as_deref() {
        Some(key) => backend.extend_as(key, permit.kind(), lock_id, ttl),
        None => backend.extend(lock_id, ttl),
    }
}
