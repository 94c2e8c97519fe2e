//! Shared holders (readers) of a lock: each a lease of its own in the lock's holder set
//! ([`SharedKeys`](super::layout::SharedKeys), beside the lock's line in its hash slot), granted
//! by one script that reads the lock record, decides in the lock's line and takes the lock's
//! next fence. Their release, renewal and reading are the semaphores' (`semaphore.rs`); the
//! exclusive acquire counts them in its own script (`scripts/acquire.lua`). See [Shared
//! holders](super#shared-holders).

use super::acquire_args::push_request_args;
use super::replicas::ReplicaAcks;
use super::scripts::SCRIPTS;
use super::semaphore::{Attempt, run_acquire};
use super::slot::key_slot;
use super::store::Store;
use crate::driver::{Key, LeaseKind, Request};
use crate::error::Result;

/// Takes a shared hold of the lock on `key` as `request` asks: one script on the lock's keys,
/// its line's and its shared holders' (and `WAIT` on the same connection with `min_replicas`,
/// for a granted hold only).
pub(super) fn acquire(
    store: &Store,
    replicas: Option<&ReplicaAcks>,
    key: &Key,
    request: &Request<'_>,
) -> Result<Attempt> {
    let lock_keys = store.keys.lock_keys(key.as_str())?;
    let tagged = store.keys.tagged(key.as_str())?;
    let line_keys = tagged.line_keys(LeaseKind::Shared);
    let shared_keys = tagged.shared_keys();
    let lock_id = store.keys.new_lock_id();
    let slot = key_slot(lock_keys.lock.as_bytes());
    let mut invocation = SCRIPTS.shared_acquire.key(&lock_keys.lock);
    invocation.key(&lock_keys.fence);
    super::acquire_args::push_keys(&mut invocation, &line_keys);
    invocation
        .key(&shared_keys.holders)
        .key(&shared_keys.records);
    push_request_args(&mut invocation, &lock_id, key, request);
    run_acquire(store, replicas, key, lock_id, slot, &invocation)
}
