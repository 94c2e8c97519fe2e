//! `syncguard acquire`: takes a lock (a shared hold, a permit, or several keys' locks) and
//! leaves it held until `--ttl`, printing what `release` and `extend` need to act on it.

use std::time::{Duration, Instant};

use serde_json::json;
use syncguard::driver::Holder;
use syncguard::{CancelToken, Heartbeat, LockBackend, LockError, LockOptions, Locker};

use crate::args::LockArgs;
use crate::hold::Hold;
use crate::keys::Keys;
use crate::outcome::Outcome;
use crate::waiting::waiting;
use crate::{connecting, holder, input};

/// `acquire`: the arguments checked first (bad usage exits 2 without reaching the backend),
/// then the backend, connected to within `--wait`, and the lock taken within what is left of it.
pub fn acquire(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    lock: &LockArgs,
) -> syncguard::Result<Outcome> {
    let holder = match lock.holder.as_deref() {
        Some(given) => Some(holder::given(given)?),
        None => holder::of_acquire(),
    };
    let keys = Keys::of(
        &lock.keys,
        Hold::of(lock.shared, lock.permits) == Hold::Exclusive,
    )?;
    input::ttl(lock.ttl)?;
    let options = acquire_options(lock, holder);
    options.validate()?;
    // --wait covers connecting too: a store that is restarting is waited for.
    let asked = Instant::now();
    let backend = connecting::within(connect, lock.wait, &CancelToken::new())?;
    let wait = lock.wait.saturating_sub(asked.elapsed());
    taken(backend, lock, &keys, options, wait)
}

/// `acquire`'s lease: no heartbeat, as this process ends now and the lease must outlive it
/// until --ttl.
fn acquire_options(lock: &LockArgs, holder: Option<Holder>) -> LockOptions {
    let options = waiting(LockOptions::default())
        .ttl(lock.ttl)
        .heartbeat(Heartbeat::Off)
        .wait_in_line(!lock.no_line);
    match holder {
        Some(holder) => options.holder(holder.into_string()),
        None => options,
    }
}

/// The lock taken within `wait`, and what `acquire` prints for it.
fn taken(
    backend: Box<dyn LockBackend>,
    lock: &LockArgs,
    keys: &Keys,
    options: LockOptions,
    wait: Duration,
) -> syncguard::Result<Outcome> {
    let locker = Locker::with_defaults(backend, options);
    let hold = Hold::of(lock.shared, lock.permits);
    let Some(held) = hold.take(&locker, keys, wait)? else {
        if lock.quiet {
            return Ok(Outcome::Exit(1));
        }
        return Ok(Outcome::Printed(
            json!({ "ok": false, "reason": "locked" }),
            1,
        ));
    };
    // The lock outlives this process: the caller releases it with `release`.
    let leases = held.detach();
    if let Keys::Several(keys) = keys {
        // One line per key, in key order, each naming its key: `release --acquired` takes
        // them back.
        let lines = keys
            .iter()
            .zip(leases)
            .map(|(key, lease)| {
                json!({
                    "ok": true,
                    "key": key,
                    "lockId": lease.lock_id,
                    "fence": lease.fence,
                    "expiresAtMs": lease.expires_at_ms,
                })
            })
            .collect();
        return Ok(Outcome::Lines(lines));
    }
    let Some(lease) = leases.into_iter().next() else {
        return Err(LockError::internal("the acquisition returned no lease"));
    };
    let mut printed = json!({
        "ok": true,
        "lockId": lease.lock_id,
        "fence": lease.fence,
        "expiresAtMs": lease.expires_at_ms,
    });
    // A permit's or a shared hold's lock id means nothing without its key and `--permit` or
    // `--shared`: say which it is.
    if let Some(fields) = printed.as_object_mut() {
        match hold {
            Hold::Permit(permits) => drop(fields.insert("permits".to_owned(), json!(permits))),
            Hold::Shared => drop(fields.insert("shared".to_owned(), json!(true))),
            Hold::Exclusive => {}
        }
    }
    Ok(Outcome::Printed(printed, 0))
}
