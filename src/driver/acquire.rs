//! What the crate does around every store's acquisition, written once: a request in a mode
//! the store lacks is refused before anything is sent, and a set of keys it cannot decide in
//! one step is taken one key at a time ([`Capabilities`](crate::driver::Capabilities) says
//! which).

use super::lease::{Lease, LeaseKind, LeaseRef, Version};
use super::request::{Acquisitions, Mode, Request};
use super::seam::Driver;
use crate::error::{LockError, Result};
use crate::key::Key;
use crate::lock_id::LockId;

/// Asks `driver` for `request`, the way every caller in the crate does: refused
/// (`InvalidArgument`) when the store has no such mode; several keys the store cannot decide
/// in one step (or in a mode other than exclusive) go through [`acquire_one_by_one`]; the rest
/// go to [`Driver::try_acquire`] as they are.
pub fn acquire<D: Driver + ?Sized>(driver: &D, request: &Request<'_>) -> Result<Acquisitions> {
    if request.mode == Mode::Exclusive && request.key().is_some() {
        return driver.try_acquire(request);
    }
    let capabilities = driver.describe();
    let lacks = match request.mode {
        Mode::Exclusive => None,
        Mode::Shared => (!capabilities.shared_mode).then_some("shared mode"),
        Mode::Permit(_) => (!capabilities.semaphores).then_some("semaphores"),
    };
    if let Some(what) = lacks {
        return Err(LockError::invalid_argument(format!(
            "the {} backend has no {what}",
            capabilities.backend
        )));
    }
    let native = capabilities.native_sets && request.mode == Mode::Exclusive;
    if request.key().is_some() || native {
        driver.try_acquire(request)
    } else {
        acquire_one_by_one(driver, request)
    }
}

/// Several keys for a store that cannot decide them in one step: each key in the set's order
/// with [`Driver::try_acquire`], and on the first refusal every key taken so far given back
/// before answering [`Acquisitions::Locked`]. All or none as the caller sees it, but not at
/// one instant: another caller may find some of the keys held for the moment between.
///
/// A waiter stands in line on the key that refused it, with its one ticket
/// ([several keys](crate::driver::admit_all)): each key is asked with
/// [`Line::WaitAt`](crate::driver::Line::WaitAt); at the first refusal, before the waiter has
/// a ticket, the refusing key's line gives it one
/// ([`Line::Wait`](crate::driver::Line::Wait), then [`Driver::find_line`] reads it back).
/// Each attempt stops at its first refused key, so a waiter takes its places one refusal at a
/// time.
///
/// A failure ends the attempt after the keys taken are given back; a give-back that fails is
/// reported as an acquisition in doubt of that lock id (its caller releases it later).
pub fn acquire_one_by_one<D: Driver + ?Sized>(
    driver: &D,
    request: &Request<'_>,
) -> Result<Acquisitions> {
    let kind = request.mode.kind();
    let mut taken = Vec::with_capacity(request.keys().len());
    for key in request.keys() {
        match driver.try_acquire(&request.for_key(key)) {
            Ok(Acquisitions::Acquired(mut leases)) if leases.len() == 1 => {
                taken.extend(leases.pop());
            }
            Ok(Acquisitions::Acquired(leases)) => {
                // A driver bug: the keys taken so far are given back, and this key's leases on
                // this key (not paired with the keys after it).
                let mut unreleased = give_back(driver, request, kind, &taken)
                    .map_or_else(Vec::new, |(_, unreleased)| unreleased);
                for (lease, version) in &leases {
                    if release_granted(driver, key, kind, lease, version.as_ref()).is_err() {
                        unreleased.push((key.to_string(), lease.lock_id.clone()));
                    }
                }
                return Err(LockError::internal(format!(
                    "the backend granted {} leases for one key",
                    leases.len()
                ))
                .with_key(key.as_str())
                .in_doubt_all(unreleased));
            }
            Ok(Acquisitions::Locked { position, .. }) => {
                if let Some((failure, unreleased)) = give_back(driver, request, kind, &taken) {
                    return Err(LockError::new(
                        failure.code(),
                        format!(
                            "giving back a key taken with others failed: {}",
                            failure.message()
                        ),
                    )
                    .in_doubt_all(unreleased));
                }
                let ticket = match (request.line.place(), request.line.ticket()) {
                    (Some(place), None) => driver
                        .find_line(key, kind.sequence())?
                        .iter()
                        .find(|stood| stood.place_id == place.as_str())
                        .map(|stood| stood.ticket),
                    (_, ticket) => ticket,
                };
                return Ok(Acquisitions::Locked { ticket, position });
            }
            Err(error) => {
                // The failed key's own doubt (if any) and every key that could not be given
                // back are all in doubt: the caller releases each later.
                let Some((_, unreleased)) = give_back(driver, request, kind, &taken) else {
                    return Err(error);
                };
                let own: Vec<(String, String)> = error
                    .in_doubt_leases()
                    .into_iter()
                    .map(|(named, lock_id)| {
                        (named.unwrap_or(key.as_str()).to_owned(), lock_id.to_owned())
                    })
                    .collect();
                return Err(error.in_doubt_all(own.into_iter().chain(unreleased)));
            }
        }
    }
    Ok(Acquisitions::Acquired(taken))
}

/// Releases the leases `taken` for the first keys of `request` (in its order), which a set
/// acquisition took and will not keep: every one is tried. `None` when all were given back;
/// else the first failure and every (key, lock id) that was not — what the acquisition's error
/// reports in doubt ([`LockError::in_doubt_all`]).
fn give_back<D: Driver + ?Sized>(
    driver: &D,
    request: &Request<'_>,
    kind: LeaseKind,
    taken: &[(Lease, Option<Version>)],
) -> Option<(LockError, Vec<(String, String)>)> {
    let mut first_failure = None;
    let mut unreleased = Vec::new();
    for (key, (lease, version)) in request.keys().iter().zip(taken) {
        if let Err(error) = release_granted(driver, key, kind, lease, version.as_ref()) {
            first_failure.get_or_insert(error);
            unreleased.push((key.to_string(), lease.lock_id.clone()));
        }
    }
    first_failure.map(|failure| (failure, unreleased))
}

/// Releases a lease just granted on `key` that its caller will not keep. A malformed lock id
/// cannot be named to the store: nothing is sent, and it expires at its TTL.
pub(crate) fn release_granted<D: Driver + ?Sized>(
    driver: &D,
    key: &Key,
    kind: LeaseKind,
    lease: &Lease,
    version: Option<&Version>,
) -> Result<()> {
    let Ok(lock_id) = LockId::new(&lease.lock_id) else {
        return Ok(());
    };
    let given_back = LeaseRef::new(&lock_id)
        .with_key(key)
        .with_kind(kind)
        .with_version(version);
    driver.release_lease(given_back).map(drop)
}
