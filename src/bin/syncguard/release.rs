//! `syncguard release`: gives back locks (or a permit, or a shared hold) that `acquire` took.

use serde_json::json;
use syncguard::LockBackend;

use crate::args::{LockIdArgs, PermitOf};
use crate::lock_ids::several_answered;
use crate::outcome::Outcome;

/// `release`: the ids and `--key` checked first, then each lease released, every one tried.
pub fn release(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    ids: LockIdArgs,
    permit: &PermitOf,
) -> syncguard::Result<Outcome> {
    let ids = ids.checked()?;
    permit.check()?;
    let backend = connect()?;
    let release =
        |id: &str| released(permit, backend.as_ref(), id).map(|released| released.then_some(()));
    if let Some(id) = ids.single() {
        let released = release(id)?.is_some();
        return Ok(Outcome::Printed(
            json!({ "ok": released }),
            u8::from(!released),
        ));
    }
    let (_, not_held) = ids.each("released", release)?;
    Ok(several_answered(json!({ "ok": true }), not_held))
}

/// Releases the lease `lock_id` names (a permit's or a shared hold's with `--key`): `true`
/// when this call removed it.
fn released(
    permit: &PermitOf,
    backend: &dyn LockBackend,
    lock_id: &str,
) -> syncguard::Result<bool> {
    match permit.key.as_deref() {
        Some(key) => backend.release_as(key, permit.kind(), lock_id),
        None => backend.release(lock_id),
    }
}
