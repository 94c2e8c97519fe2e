//! The Redis backend itself: [`RedisBackend`] and its [`Driver`] implementation, which hands
//! each operation to the key layout's part (`typescript.rs`, `split.rs`) over the shared
//! [`Store`](super::store).

use std::fmt;

use super::{breaking, line, scripts, semaphore, shared, split, typescript};

use super::acquire_args::{self, push_request_args};
use super::errors::{Phase, Unanswered, map_error};
use super::layout::{KeyLayout, LineKeys, SemaphoreKeys, SharedKeys};
use super::replicas::ReplicaAcks;
use super::scripts::{Reply, SCRIPTS, Status};
use super::slot::key_slot;
use super::store::Store;
use super::watch::{RedisWatch, WatchSource};
use crate::driver::{
    Acquisitions, BreakOrder, Broken, Driver, Extension, Find, Key, KeyPrefix, LeaseKind, LeaseRef,
    ListLimit, LockId, LockList, LockRecord, Mode, OnRelease, Outcome, PlaceRecord, ReleaseWatch,
    Request, TIME_TOLERANCE_MS, Ttl,
};
use crate::driver::{Capabilities, TimeAuthority, acquire_one_by_one, extend_by_kind, in_order};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;

/// A listing's answer.
type Listed = Result<LockList<LockRecord>>;

/// How long past expiry a lock must be before the opt-in cleanup in `is_locked` deletes it,
/// so that it can never race a renewal.
pub const CLEANUP_GUARD_MS: i64 = 2000;

/// Distributed locks in Redis: one server, a Cluster, or a primary behind Sentinels. See the
/// [module docs](super) for the storage layouts and what each topology guarantees.
///
/// Built with [`RedisBackend::connect`] or [`RedisBackend::builder`]; cheap to share behind a
/// [`Locker`](crate::Locker) across threads (connections come from an r2d2 pool).
pub struct RedisBackend {
    /// The connections, the server and the key names.
    pub(super) store: Store,
    /// Where the release watch gets its own connection (`None` with the application's pool,
    /// whose waiters poll).
    pub(super) watch: Option<WatchSource>,
    pub(super) cleanup_in_is_locked: bool,
    /// `min_replicas`: the acknowledgements each acquisition waits for.
    pub(super) replicas: Option<ReplicaAcks>,
    pub(super) display_url: String,
    /// The most keys one listing asks `SCAN` to examine.
    pub(super) list_scan_budget: usize,
}

impl RedisBackend {
    /// The key prefix in use (without trailing `:`).
    pub fn key_prefix(&self) -> &str {
        self.store.keys.prefix()
    }

    /// The key layout in use.
    pub fn layout(&self) -> KeyLayout {
        self.store.keys.layout()
    }

    /// The Redis key holding the lock on `key` (for inspection and tests).
    pub fn lock_key(&self, key: &str) -> Result<String> {
        Ok(self.store.keys.lock_keys(Key::new(key)?.as_str())?.lock)
    }

    /// The Redis key of the reverse index entry of `lock_id`.
    pub fn index_key(&self, lock_id: &str) -> Result<String> {
        Ok(self.store.keys.index_key(&LockId::new(lock_id)?))
    }

    /// The Redis key of the fence counter of `key`.
    pub fn fence_key(&self, key: &str) -> Result<String> {
        Ok(self.store.keys.lock_keys(Key::new(key)?.as_str())?.fence)
    }

    /// The Redis keys of the semaphore on `key` (for inspection and tests): the same in both
    /// layouts.
    pub fn semaphore_keys(&self, key: &str) -> Result<SemaphoreKeys> {
        self.store.keys.semaphore_keys(Key::new(key)?.as_str())
    }

    /// The Redis keys of the shared holders of the lock on `key` (for inspection and tests):
    /// the same in both layouts.
    pub fn shared_keys(&self, key: &str) -> Result<SharedKeys> {
        self.store.keys.shared_keys(Key::new(key)?.as_str())
    }

    /// The Redis keys of the line of waiters for the lock (`kind` [`LeaseKind::Lock`]) or the
    /// semaphore ([`LeaseKind::Permit`]) on `key` (for inspection and tests): the same in both
    /// layouts.
    pub fn line_keys(&self, key: &str, kind: LeaseKind) -> Result<LineKeys> {
        self.store.keys.line_keys(Key::new(key)?.as_str(), kind)
    }

    /// A permit's or shared hold's acquisition, undone (and refused) when `min_replicas` is set
    /// and too few replicas acknowledged it.
    fn judge_replicas(
        &self,
        attempt: semaphore::Attempt,
        kind: LeaseKind,
        key: &Key,
    ) -> Result<Acquisitions> {
        if let (Some(policy), Some(acknowledged)) = (&self.replicas, attempt.acknowledged)
            && !matches!(acknowledged, Ok(n) if n >= i64::from(policy.replicas))
        {
            let lease = match kind {
                LeaseKind::Shared => LeaseRef::shared(&attempt.lock_id, key),
                LeaseKind::Permit | LeaseKind::Lock => LeaseRef::permit(&attempt.lock_id, key),
            };
            return Err(self.undo_unreplicated(lease, key, acknowledged));
        }
        Ok(attempt.acquisition)
    }

    /// Releases a lock (or permit) whose acquisition did not reach enough replicas, and says
    /// so.
    fn undo_unreplicated(
        &self,
        lease: LeaseRef<'_>,
        key: &Key,
        why: std::result::Result<i64, LockError>,
    ) -> LockError {
        if let Err(error) = self.release_lease(lease) {
            log::warn!(
                "syncguard: could not release the lock on {key:?} after too few replicas \
                 acknowledged it; it expires with its TTL: {error}"
            );
        }
        self.unreplicated(key, why)
    }

    /// The error for an acquisition of `key` that too few replicas acknowledged (`why`: how
    /// many did, or why that is not known), once it is released.
    pub(super) fn unreplicated(
        &self,
        key: &Key,
        why: std::result::Result<i64, LockError>,
    ) -> LockError {
        let Some(policy) = &self.replicas else {
            return LockError::internal("replica acknowledgements without min_replicas");
        };
        let error = match why {
            Ok(acknowledged) => LockError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "only {acknowledged} of the {} replicas required (min_replicas) acknowledged \
                     the acquisition within {:?} (Redis {}); the lock was released so that its \
                     fence cannot be handed out again after a failover",
                    policy.replicas,
                    policy.timeout,
                    self.store.server.location()
                ),
            ),
            Err(error) => LockError::new(
                if error.code().is_transient() {
                    error.code()
                } else {
                    ErrorCode::ServiceUnavailable
                },
                format!(
                    "could not confirm that {} replicas (min_replicas) have the acquisition; the \
                     lock was released: {}",
                    policy.replicas,
                    error.message()
                ),
            ),
        };
        error.with_key(key.as_str())
    }

    /// Renews one lease: one script, the kind's (and the layout's, for a lock; a proclaim's
    /// for a lock's lease that carries a holder text).
    fn extend_one(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        if matches!(lease.kind, LeaseKind::Permit | LeaseKind::Shared) {
            if lease.holder.is_some() {
                return Err(LockError::invalid_argument(
                    "only a lock's holder text can be replaced",
                ));
            }
            return semaphore::extend(&self.store, lease, ttl);
        }
        match self.store.keys.layout() {
            KeyLayout::TypeScript => typescript::extend(&self.store, lease, ttl),
            KeyLayout::Cluster => split::extend(&self.store, lease, ttl),
        }
    }

    /// The exclusive lock on `key`: one script (`acquire.lua`), and in the cluster layout the
    /// index entry's `SET` beside it in the same round trip.
    fn acquire_lock(&self, key: &Key, request: &Request<'_>) -> Result<Acquisitions> {
        let ttl = request.ttl;
        let store = &self.store;
        let keys = store.keys.lock_keys(key.as_str())?;
        // The line's and the readers' keys from one hash tag.
        let tagged = store.keys.tagged(key.as_str())?;
        let line_keys = tagged.line_keys(LeaseKind::Lock);
        let readers = tagged.shared_keys().holders;
        let lock_id = store.keys.new_lock_id();
        let index_key = store.keys.index_key(&lock_id);
        // The slots an acquisition writes, which `min_replicas` waits for: the record's (with
        // the counter), and in the cluster layout the index entry's.
        let mut slots = vec![key_slot(keys.lock.as_bytes())];
        let mut invocation = SCRIPTS.acquire.key(&keys.lock);
        invocation.key(&keys.fence);
        acquire_args::push_keys(&mut invocation, &line_keys);
        // Live shared holders refuse a writer in this same script.
        invocation.key(&readers);
        // The index entry: written by the script itself in the TypeScript layout (its keys
        // share one server's keyspace), by a `SET` sent beside it in the cluster layout (it
        // lies in another hash slot).
        let set_index = match store.keys.layout() {
            KeyLayout::TypeScript => {
                invocation.key(&index_key);
                None
            }
            KeyLayout::Cluster => {
                slots.push(key_slot(index_key.as_bytes()));
                Some(split::set_index(&index_key, &keys.lock, ttl))
            }
        };
        push_request_args(&mut invocation, &lock_id, key, request);
        let unanswered = Unanswered::default();
        let note = |error: redis::RedisError| {
            unanswered.note(&error);
            error
        };
        let answer = store.pool.run_on(&store.server, |mut conn| {
            // `index`: the answer to the index entry's `SET`, when one was sent.
            let (value, index) = match &set_index {
                Some(set_index) => {
                    let answers = split::script_with_index(
                        &mut conn,
                        &invocation,
                        &SCRIPTS.acquire,
                        set_index.clone(),
                    )
                    .map_err(note)?;
                    (answers.script, Some(answers.index))
                }
                None => (invocation.invoke(conn.as_dyn()).map_err(note)?, None),
            };
            // WAIT counts the acknowledgements of this connection's writes, so it goes on the
            // same connection; its failure is an answer, not a reason to repeat the script.
            let acknowledged = match &self.replicas {
                Some(policy) if scripts::granted(&value) => Some(policy.wait(conn, &slots)),
                _ => None,
            };
            Ok((value, index, acknowledged))
        });
        let (value, index, acknowledged) =
            answer.map_err(|error| unanswered.judge(error, key.as_str(), lock_id.as_str()))?;
        let mut reply = Reply::parse(value)?;
        match reply.status {
            Status::Ok => {
                let fence: Fence = reply.string()?.parse()?;
                // Re-issuing through from_counter applies the warning threshold.
                let fence =
                    Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
                let expires_at_ms = reply.int()?;
                if let Some(Err(error)) = index {
                    return Err(split::undo_unindexed(store, key, &lock_id, error));
                }
                if let (Some(policy), Some(acknowledged)) = (&self.replicas, acknowledged) {
                    let acknowledged =
                        acknowledged.map_err(|e| map_error(e, &store.server, Phase::Call));
                    if !matches!(acknowledged, Ok(n) if n >= i64::from(policy.replicas)) {
                        let lease = LeaseRef::new(&lock_id).with_key(key);
                        return Err(self.undo_unreplicated(lease, key, acknowledged));
                    }
                }
                Ok(Acquisitions::granted(
                    lock_id.into_string(),
                    fence,
                    expires_at_ms,
                    None,
                ))
            }
            Status::Absent => Ok(Acquisitions::locked_at(reply.position()?)),
            Status::FenceOverflow | Status::BadCounter | Status::Foreign => {
                let error = store.refusal(&mut reply, Some(key));
                if let Some(Ok(_)) = index {
                    // The index entry went out beside the script (one round trip) and points
                    // at no lock of this lock id: a refusal leaves nothing behind.
                    split::drop_index_entry(store, &index_key);
                }
                Err(error)
            }
            Status::NotFound | Status::Expired => Err(store.foreign(Some(key.as_str()))),
        }
    }
}

/// Each method that differs between the key layouts decides on the layout once, handing the
/// layout's part to `typescript.rs` or `split.rs`.
impl Driver for RedisBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("redis", true, TimeAuthority::Server).with_every_mode()
    }

    /// One key: the kind's own script (`acquire.lua`, `semaphore_acquire.lua`,
    /// `shared_acquire.lua`). Several (exclusive): one script for the whole set (see
    /// `multi.rs`); on a Cluster whose keys lie in several hash slots, key by key
    /// (`slots_set.rs`).
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        let Some(key) = request.key() else {
            if request.mode != Mode::Exclusive {
                return acquire_one_by_one(self, request);
            }
            return self.acquire_all(request);
        };
        let (attempt, kind) = match request.mode {
            Mode::Exclusive => return self.acquire_lock(key, request),
            Mode::Shared => (
                shared::acquire(&self.store, self.replicas.as_ref(), key, request)?,
                LeaseKind::Shared,
            ),
            Mode::Permit(permits) => (
                semaphore::acquire(&self.store, self.replicas.as_ref(), key, permits, request)?,
                LeaseKind::Permit,
            ),
        };
        self.judge_replicas(attempt, kind, key)
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        line::leave(&self.store, key, kind, place)
    }

    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        line::find(&self.store, key, kind)
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        if matches!(lease.kind, LeaseKind::Permit | LeaseKind::Shared) {
            return semaphore::release(&self.store, lease);
        }
        match self.store.keys.layout() {
            KeyLayout::TypeScript => typescript::release(&self.store, lease),
            KeyLayout::Cluster => split::release(&self.store, lease),
        }
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let store = &self.store;
        let lock_key = store.keys.lock_keys(key.as_str())?.lock;
        let cleanup = if self.cleanup_in_is_locked { "1" } else { "0" };
        let index_head = store.keys.cleanup_index_head();
        let mut reply = store.run(|conn| {
            SCRIPTS
                .is_locked
                .key(&lock_key)
                .arg(TIME_TOLERANCE_MS)
                .arg(cleanup)
                .arg(&index_head)
                .arg(CLEANUP_GUARD_MS)
                .invoke(conn)
        })?;
        match reply.status {
            Status::Ok => Ok(true),
            Status::Foreign => Err(store.refusal(&mut reply, Some(key))),
            _ => Ok(false),
        }
    }

    /// Locks and permits of one batch go in two pipelines (the locks' as the layout renews
    /// them, the permits' through their semaphores' keys), and each answer is put back at its
    /// own lease's place. A batch of one (a guard's extension) is one script, as it always
    /// was, not a pipeline.
    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        if let [(lease, ttl)] = leases {
            return vec![self.extend_one(*lease, *ttl)];
        }
        if leases.iter().any(|(lease, _)| lease.holder.is_some()) {
            // A proclaim is rare: each lease that carries a holder text goes alone, and the
            // rest as the batch it would have been.
            let (proclaims, renewals): (Vec<usize>, Vec<usize>) =
                (0..leases.len()).partition(|&i| leases[i].0.holder.is_some());
            let batch: Vec<(LeaseRef<'_>, Ttl)> = renewals.iter().map(|&i| leases[i]).collect();
            let mut answers: Vec<_> = renewals
                .into_iter()
                .zip(self.extend_leases(&batch))
                .collect();
            answers.extend(
                proclaims
                    .into_iter()
                    .map(|i| (i, self.extend_one(leases[i].0, leases[i].1))),
            );
            return in_order(leases.len(), answers);
        }
        extend_by_kind(leases, |kind, batch| match kind {
            LeaseKind::Lock => match self.store.keys.layout() {
                KeyLayout::TypeScript => typescript::extend_all(&self.store, batch),
                KeyLayout::Cluster => split::extend_all(&self.store, batch),
            },
            LeaseKind::Permit | LeaseKind::Shared => semaphore::extend_all(&self.store, batch),
        })
    }

    /// One script: `break_lock.lua` or `break_holders.lua` (see `breaking.rs`).
    fn break_leases(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        breaking::break_leases(&self.store, order)
    }

    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let Some(source) = &self.watch else {
            return Ok(None);
        };
        let watch = RedisWatch::start(source.opener(), self.store.keys.prefix(), on_release)
            .map_err(|e| {
                LockError::new(
                    ErrorCode::ServiceUnavailable,
                    format!("could not start the Redis release watch: {e}"),
                )
            })?;
        Ok(Some(Box::new(watch)))
    }

    /// A lock by key or lock id as the layout stores it; the permits and shared holders of a
    /// key from their holder set (`semaphore.rs`).
    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        let store = &self.store;
        let key = match by {
            Find::Key(key, LeaseKind::Lock) => key,
            Find::Key(key, kind) => return semaphore::find(store, key, kind),
            Find::LockId(lock_id) => {
                return match store.keys.layout() {
                    KeyLayout::TypeScript => typescript::find(store, lock_id),
                    KeyLayout::Cluster => split::find(store, lock_id),
                }
                .map(Vec::from_iter);
            }
        };
        let lock_key = store.keys.lock_keys(key.as_str())?.lock;
        let mut reply = store.lookup(&lock_key)?;
        match reply.status {
            Status::Ok => Ok(vec![store.decode(&reply.string()?)?]),
            Status::Foreign => Err(store.refusal(&mut reply, Some(key))),
            _ => Ok(Vec::new()),
        }
    }

    /// Walks the lock records, the semaphores' permits hashes or the locks' shared holders'
    /// records hashes under one scan budget; see [Listing](super#listing).
    fn list_records(&self, prefix: &KeyPrefix, kind: LeaseKind, limit: ListLimit) -> Listed {
        self.store.list(prefix, kind, limit, self.list_scan_budget)
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.store.pool.state();
        f.debug_struct("RedisBackend")
            .field("url", &self.display_url)
            .field("key_prefix", &self.store.keys.prefix())
            .field("layout", &self.store.keys.layout())
            .field("min_replicas", &self.replicas.map(|r| r.replicas))
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("pool_size", &self.store.pool.max_size())
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
}
