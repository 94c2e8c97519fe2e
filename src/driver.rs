//! Writing a backend: the [`Driver`] trait, the validated values it is given, the outcomes it
//! returns (among them the [`Lease`] it grants and its [`Capabilities`]), and the toolkit every
//! store shares with the TypeScript SyncGuard (storage keys, liveness, TTLs, limits).
//!
//! A driver is a store's protocol and nothing else. Everything a lock user calls — the
//! [`LockBackend`](crate::LockBackend) methods with their plain `&str`/`Duration` arguments and
//! `bool`/`Option` answers, sanitised lookups, [`get_by_key`](crate::get_by_key) and friends,
//! [`owns`](crate::owns), telemetry, and the [`Locker`](crate::Locker) with its guards and
//! heartbeat — is written once on top, for every driver. The same split as `lock_api`'s
//! `RawMutex` under its `Mutex`, or r2d2's `ManageConnection` under its `Pool`.
//!
//! What the types guarantee, so a driver need not check again:
//! - a [`Key`] is NFC-normalised and 1 to 512 bytes; a [`LockId`] has the lock-id shape; a
//!   [`Ttl`] is a whole number of milliseconds from 1 ms to [`MAX_TTL_MS`] (10^13 ms); a
//!   [`Holder`] is 1 to 256 bytes without control characters — all checked before any I/O,
//!   where they entered the crate;
//! - a [`LeaseRef`] names a lease by its lock id and, when its holder knows them, its key and
//!   the [`Version`] the store reported for it, so a driver can go straight to the record.
//!
//! What a driver must guarantee (the contract suite, [`testing`](crate#features), checks it):
//! - liveness is [`is_live`] with [`TIME_TOLERANCE_MS`] against the store's time authority;
//!   expired and missing locks look the same to every caller;
//! - acquiring is atomic and issues a fence one above the key's last ([`Fence::from_counter`]);
//!   fence counters are never deleted and never expire;
//! - releasing and extending resolve the lease, check that the stored lock is live and has its
//!   lock id, and mutate, in one atomic step; neither ever revives an expired lock, and an
//!   extension replaces the expiry with *now + ttl*;
//! - [`Driver::key_is_locked`], [`Driver::find`] and [`Driver::list_records`] only read.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use syncguard::driver::*;
//! use syncguard::{Capabilities, Fence, Lease, LockBackend, TimeAuthority};
//!
//! /// A toy store: one map, the client clock, no expiry sweeping.
//! #[derive(Default)]
//! struct Toy(Mutex<(HashMap<String, LockRecord>, HashMap<String, u64>)>);
//!
//! impl Driver for Toy {
//!     fn describe(&self) -> Capabilities {
//!         Capabilities::new("toy", true, TimeAuthority::Client)
//!     }
//!     fn try_acquire(&self, key: &Key, ttl: Ttl, holder: Option<&Holder>, _: Line<'_>) -> syncguard::Result<Acquisition> {
//!         let now = SystemClock.now_ms();
//!         let mut state = self.0.lock().unwrap();
//!         let (locks, fences) = &mut *state;
//!         if locks.get(key.as_str()).is_some_and(|r| is_live(r.expires_at_ms, now, TIME_TOLERANCE_MS)) {
//!             return Ok(Acquisition::Locked);
//!         }
//!         let counter = fences.entry(key.to_string()).or_default();
//!         *counter += 1;
//!         let lease = Lease { lock_id: generate_lock_id(), fence: Fence::from_counter(*counter)?, expires_at_ms: now + ttl.as_millis() };
//!         locks.insert(key.to_string(), LockRecord {
//!             key: key.to_string(), lock_id: lease.lock_id.clone(), expires_at_ms: lease.expires_at_ms,
//!             acquired_at_ms: now, fence: lease.fence, holder: holder.map(|h| h.to_string()),
//!         });
//!         Ok(Acquisition::granted(lease.lock_id, lease.fence, lease.expires_at_ms, None))
//!     }
//!     fn release_lease(&self, lease: LeaseRef<'_>) -> syncguard::Result<Outcome<()>> {
//!         let now = SystemClock.now_ms();
//!         let mut state = self.0.lock().unwrap();
//!         let Some(key) = state.0.iter().find(|(_, r)| r.lock_id == lease.lock_id.as_str()).map(|(k, _)| k.clone()) else {
//!             return Ok(Outcome::NotFound);
//!         };
//!         let record = state.0.remove(&key).unwrap();
//!         Ok(if is_live(record.expires_at_ms, now, TIME_TOLERANCE_MS) { Outcome::Applied(()) } else { Outcome::Expired })
//!     }
//!     fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> syncguard::Result<Outcome<Extension>> {
//!         let now = SystemClock.now_ms();
//!         let mut state = self.0.lock().unwrap();
//!         let Some(record) = state.0.values_mut().find(|r| r.lock_id == lease.lock_id.as_str()) else {
//!             return Ok(Outcome::NotFound);
//!         };
//!         if !is_live(record.expires_at_ms, now, TIME_TOLERANCE_MS) {
//!             return Ok(Outcome::Expired);
//!         }
//!         record.expires_at_ms = now + ttl.as_millis();
//!         Ok(Outcome::Applied(Extension { expires_at_ms: record.expires_at_ms, version: None }))
//!     }
//!     fn key_is_locked(&self, key: &Key) -> syncguard::Result<bool> {
//!         Ok(self.find(Find::Key(key))?.is_some())
//!     }
//!     fn find(&self, by: Find<'_>) -> syncguard::Result<Option<LockRecord>> {
//!         let now = SystemClock.now_ms();
//!         let state = self.0.lock().unwrap();
//!         Ok(state.0.values()
//!             .find(|r| match by { Find::Key(k) => r.key == k.as_str(), Find::LockId(id) => r.lock_id == id.as_str() })
//!             .filter(|r| is_live(r.expires_at_ms, now, TIME_TOLERANCE_MS))
//!             .cloned())
//!     }
//! }
//!
//! // Every lock-user call comes with it:
//! let toy = Toy::default();
//! let lease = toy.acquire("job", std::time::Duration::from_secs(5))?.lease().unwrap();
//! assert!(toy.is_locked("job")?);
//! assert!(toy.release(&lease.lock_id)?);
//! assert!(toy.release("not a lock id").is_err()); // validated before the driver is called
//! # Ok::<(), syncguard::LockError>(())
//! ```

use std::fmt;
use std::sync::Arc;

use crate::error::{LockError, Result};
use crate::fence::Fence;

pub use crate::fence::{FENCE_DIGITS, FENCE_MAX, FENCE_WARN_THRESHOLD};
pub use crate::hash::hash_key;
pub use crate::holder::{Holder, MAX_HOLDER_LENGTH_BYTES};
pub use crate::key::{Key, MAX_KEY_LENGTH_BYTES, make_storage_key, normalize_and_validate_key};
pub use crate::key_set::{KeySet, MAX_KEYS};
pub use crate::line::{
    Admission, Line, PLACE_TTL, PlaceRecord, Places, SetAdmission, TicketOrder, admit_all,
};
pub use crate::listing::{
    Coverage, DEFAULT_LIST_LIMIT, KeyPrefix, ListLimit, LockList, MAX_LIST_LIMIT,
};
pub use crate::lock_id::{LOCK_ID_LENGTH, LockId, generate_lock_id, validate_lock_id};
pub use crate::permits::{MAX_PERMITS, Permits};
pub use crate::time::{
    Clock, MAX_TTL_MS, ManualClock, SystemClock, TIME_TOLERANCE_MS, Ttl, is_live, ttl_to_ms,
};

/// One store's lock protocol, over validated values. See the [module docs](self).
///
/// Each method is a single attempt: no retries (the [`Locker`](crate::Locker) retries), and a
/// deadline on every network call. Errors are [`LockError`]s with the code
/// the failure implies; an absent or expired lock is an [`Outcome`], not an error.
pub trait Driver: Send + Sync {
    /// What this store is and guarantees.
    fn describe(&self) -> Capabilities;

    /// Takes the lock on `key` for `ttl` unless a live lock exists, with a fresh lock id and the
    /// key's next fence. The expiry comes from the store's time authority. `holder`, when
    /// given, is stored with the lock and returned by [`find`](Driver::find) for as long as
    /// this lock lives (never for a later lock on the key).
    ///
    /// `line` says how the key's line of waiters is heeded (see [`Line`]: a lock has one slot).
    /// A store without a line ([`find_line`](Driver::find_line) left at its default) treats
    /// every `line` as [`Line::Ignore`]. An acquisition that finds the key free and its line
    /// empty writes nothing but the lock, in the one round trip it always made.
    fn try_acquire(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition>;

    /// Takes one of the `permits` permits of the semaphore on `key` for `ttl`, unless that
    /// many live permits are held, with a fresh lock id and the semaphore's next fence. Permits
    /// held past their expiry (and the tolerance) are reclaimed by this call. Each acquisition is
    /// judged by its own `permits` (see [`Permits`]).
    ///
    /// A semaphore is stored apart from the key's lock: its own records and its own fence
    /// sequence, never the lock record or the lock's fence counter of the same key (a
    /// semaphore of one permit on `"k"` and the lock on `"k"` are two things). Its permits are
    /// released and extended through [`release_lease`](Driver::release_lease) and
    /// [`extend_lease`](Driver::extend_lease) with a [`LeaseRef`] of
    /// [`LeaseKind::Permit`], which names the key. A release is announced to
    /// [`watch_releases`](Driver::watch_releases) with the key, as a lock's is.
    ///
    /// `line` is heeded as for a lock, over the semaphore's own line, with one slot per free
    /// permit (the first in line takes the next free permit).
    ///
    /// The default refuses (`InvalidArgument`: this backend has no semaphores); every bundled
    /// backend has them.
    fn try_acquire_permit(
        &self,
        key: &Key,
        permits: Permits,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let _ = (key, permits, ttl, holder, line);
        Err(no_semaphores(self.describe()))
    }

    /// Takes the locks on every key of `keys` for `ttl`, each with a fresh lock id and its key's
    /// next fence, or none of them: [`Acquisitions::Locked`] when any key is held (or its line
    /// goes first), and then no key of the set is held for this call. `holder` is stored with
    /// each lock. The leases answer the keys in the set's order.
    ///
    /// The default, [`acquire_one_by_one`], takes the keys one at a time and gives back what it
    /// took on a refusal; a store that can decide the whole set in one round trip (one script,
    /// statement or commit) overrides it.
    ///
    /// `line` is heeded on every key's lock line by the rule of several keys
    /// ([`admit_all`]): a waiter ([`Line::Wait`], then [`Line::WaitAt`] with the ticket the refusal
    /// answered) holds no key while it waits and stands in line with one ticket on the keys
    /// that refused it.
    fn try_acquire_all(
        &self,
        keys: &KeySet,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisitions> {
        acquire_one_by_one(self, keys, ttl, holder, line)
    }

    /// Removes the place `place` from the line of `key`'s lock or semaphore (`kind`): its
    /// waiter gave up. Nothing when it is not there. The default (a store without a line) does
    /// nothing.
    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        let _ = (key, kind, place);
        Ok(())
    }

    /// The live places of the line of `key`'s lock or semaphore (`kind`), in line order, with
    /// their raw values. Read only. The default (a store without a line) answers none.
    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        let _ = (key, kind);
        Ok(Vec::new())
    }

    /// The live permits of the semaphore on `key`, with their raw values, in fence order
    /// (at most [`MAX_PERMITS`]). The default refuses, as
    /// [`try_acquire_permit`](Driver::try_acquire_permit) does.
    fn find_permits(&self, key: &Key) -> Result<Vec<LockRecord>> {
        let _ = key;
        Err(no_semaphores(self.describe()))
    }

    /// The live permits of the semaphores whose key starts with `prefix`, with their raw
    /// values: sorted by key, then fence, at most `limit` permits, and whether that is all of
    /// them ([`Coverage`]). Read only, with bounded work, as
    /// [`list_records`](Driver::list_records) is. The default refuses, as
    /// [`try_acquire_permit`](Driver::try_acquire_permit) does.
    fn list_permit_records(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let _ = (prefix, limit);
        Err(no_semaphores(self.describe()))
    }

    /// Takes a shared hold of the lock on `key` for `ttl` (a reader), unless a live exclusive
    /// lock is held: any number of shared holders at once, none beside an exclusive one. Each
    /// shared holder is a lease of its own — a fresh lock id, the key's next fence from the
    /// *lock's* fence counter (so fences order every grant of the key, shared or exclusive),
    /// its own expiry, `holder` — stored beside the lock record, in this crate's layout only
    /// (the TypeScript SyncGuard sees exclusive records alone). Released and extended through
    /// [`release_lease`](Driver::release_lease) and [`extend_lease`](Driver::extend_lease) with
    /// a [`LeaseRef`] of [`LeaseKind::Shared`], which names the key. A store with shared holds
    /// must also refuse [`try_acquire`](Driver::try_acquire) while a live shared holder exists,
    /// in the round trip it makes anyway.
    ///
    /// `line` is heeded in the key's one line, beside exclusive waiters: a shared waiter is
    /// granted when no exclusive holder is live and no exclusive place is ahead of it (so
    /// shared waiters at the head of the line are granted together, and a writer in line is
    /// not passed by later readers); [`Places::admit`] is the rule.
    ///
    /// The default refuses (`InvalidArgument`: this backend has no shared mode).
    fn try_acquire_shared(
        &self,
        key: &Key,
        ttl: Ttl,
        holder: Option<&Holder>,
        line: Line<'_>,
    ) -> Result<Acquisition> {
        let _ = (key, ttl, holder, line);
        Err(no_shared_mode(self.describe()))
    }

    /// The live shared holders of the lock on `key`, with their raw values, in fence order.
    /// The default refuses, as [`try_acquire_shared`](Driver::try_acquire_shared) does.
    fn find_shared(&self, key: &Key) -> Result<Vec<LockRecord>> {
        let _ = key;
        Err(no_shared_mode(self.describe()))
    }

    /// The live shared holders of the locks whose key starts with `prefix`, with their raw
    /// values: sorted by key, then fence, at most `limit`, and whether that is all of them.
    /// Read only, with bounded work, as [`list_records`](Driver::list_records) is. The default
    /// refuses, as [`try_acquire_shared`](Driver::try_acquire_shared) does.
    fn list_shared_records(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let _ = (prefix, limit);
        Err(no_shared_mode(self.describe()))
    }

    /// Deletes the lock (or the permit) `lease` names if it is stored under its lock id.
    /// `Applied` only when it was live; an expired one is removed too, and answered
    /// [`Outcome::Expired`].
    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>>;

    /// Sets the expiry of the live lock (or permit) `lease` names to *now + ttl*.
    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>>;

    /// Extends several leases, each by its own TTL; one answer per lease, in order. The
    /// heartbeat renews through it. The default extends one lease after another; a store
    /// that can do many in one request should.
    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        one_by_one(self, leases)
    }

    /// Whether a live lock is stored under `key`.
    fn key_is_locked(&self, key: &Key) -> Result<bool>;

    /// The live lock on a key, or stored under a lock id, with its raw values; `None` for
    /// expired and missing alike.
    fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>>;

    /// The live locks whose key starts with `prefix`, with their raw values: sorted by key
    /// (byte order), at most `limit`, and whether that is all of them ([`Coverage`]). Read
    /// only, with bounded work: a store that cannot find keys by prefix cheaply stops at a
    /// bound it documents and answers [`Coverage::WorkBoundReached`]. Each key appears at
    /// most once.
    ///
    /// The default refuses (`InvalidArgument`: this backend cannot list locks); every bundled
    /// backend lists.
    fn list_records(&self, prefix: &KeyPrefix, limit: ListLimit) -> Result<LockList<LockRecord>> {
        let _ = (prefix, limit);
        Err(crate::error::LockError::invalid_argument(format!(
            "the {} backend cannot list locks",
            self.describe().backend
        )))
    }

    /// Starts hearing of releases, from any process, so that a [`Locker`](crate::Locker)'s
    /// waiters try again at once instead of at their next poll: `on_release` is called with
    /// the (normalised) key of each release heard, for the keys the returned [`ReleaseWatch`]
    /// is asked to watch. Dropping the watch stops it. `Ok(None)` (the default) when the store
    /// cannot tell; waiters then poll, as they also do for releases a watch misses (a lock that
    /// simply expired, a peer that does not announce its releases).
    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let _ = on_release;
        Ok(None)
    }
}

/// What [`Driver::watch_releases`] calls with the key of a release it heard of. Runs on the
/// watch's own thread: keep it short.
pub type OnRelease = Arc<dyn Fn(&str) + Send + Sync>;

/// A running watch for releases ([`Driver::watch_releases`]); dropping it stops the watch.
pub trait ReleaseWatch: Send + Sync {
    /// Reports releases of `key` from now on (a store that hears every release may ignore
    /// this). Each `watch` is balanced by an [`unwatch`](ReleaseWatch::unwatch).
    fn watch(&self, key: &Key);

    /// No longer needs releases of `key` reported.
    fn unwatch(&self, key: &Key);
}

/// Forwards every method, so `Box<dyn LockBackend>` and `Arc<B>` are drivers (and backends).
macro_rules! forward_driver {
    ($($wrapper:ident),*) => {$(
        impl<D: Driver + ?Sized> Driver for $wrapper<D> {
            fn describe(&self) -> Capabilities {
                (**self).describe()
            }
            fn try_acquire(
                &self,
                key: &Key,
                ttl: Ttl,
                holder: Option<&Holder>,
                line: Line<'_>,
            ) -> Result<Acquisition> {
                (**self).try_acquire(key, ttl, holder, line)
            }
            fn try_acquire_all(
                &self,
                keys: &KeySet,
                ttl: Ttl,
                holder: Option<&Holder>,
                line: Line<'_>,
            ) -> Result<Acquisitions> {
                (**self).try_acquire_all(keys, ttl, holder, line)
            }
            fn try_acquire_permit(
                &self,
                key: &Key,
                permits: Permits,
                ttl: Ttl,
                holder: Option<&Holder>,
                line: Line<'_>,
            ) -> Result<Acquisition> {
                (**self).try_acquire_permit(key, permits, ttl, holder, line)
            }
            fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
                (**self).leave_line(key, kind, place)
            }
            fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
                (**self).find_line(key, kind)
            }
            fn try_acquire_shared(
                &self,
                key: &Key,
                ttl: Ttl,
                holder: Option<&Holder>,
                line: Line<'_>,
            ) -> Result<Acquisition> {
                (**self).try_acquire_shared(key, ttl, holder, line)
            }
            fn find_shared(&self, key: &Key) -> Result<Vec<LockRecord>> {
                (**self).find_shared(key)
            }
            fn list_shared_records(
                &self,
                prefix: &KeyPrefix,
                limit: ListLimit,
            ) -> Result<LockList<LockRecord>> {
                (**self).list_shared_records(prefix, limit)
            }
            fn find_permits(&self, key: &Key) -> Result<Vec<LockRecord>> {
                (**self).find_permits(key)
            }
            fn list_permit_records(
                &self,
                prefix: &KeyPrefix,
                limit: ListLimit,
            ) -> Result<LockList<LockRecord>> {
                (**self).list_permit_records(prefix, limit)
            }
            fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
                (**self).release_lease(lease)
            }
            fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
                (**self).extend_lease(lease, ttl)
            }
            fn extend_leases(
                &self,
                leases: &[(LeaseRef<'_>, Ttl)],
            ) -> Vec<Result<Outcome<Extension>>> {
                (**self).extend_leases(leases)
            }
            fn key_is_locked(&self, key: &Key) -> Result<bool> {
                (**self).key_is_locked(key)
            }
            fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>> {
                (**self).find(by)
            }
            fn list_records(
                &self,
                prefix: &KeyPrefix,
                limit: ListLimit,
            ) -> Result<LockList<LockRecord>> {
                (**self).list_records(prefix, limit)
            }
            fn watch_releases(
                &self,
                on_release: OnRelease,
            ) -> Result<Option<Box<dyn ReleaseWatch>>> {
                (**self).watch_releases(on_release)
            }
        }
    )*};
}

forward_driver!(Box, Arc);

/// Which clock decides expiry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeAuthority {
    /// The store's own clock (Redis `TIME`, PostgreSQL `clock_timestamp()`): client clocks do
    /// not matter.
    Server,
    /// The client's clock (Firestore, memory): keep clients NTP-synchronised.
    Client,
}

/// What a backend is and guarantees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Capabilities {
    /// Short backend name: `"memory"`, `"redis"`, `"postgres"`, `"firestore"`.
    pub backend: &'static str,
    /// Whether acquisitions return fencing tokens (all bundled backends do).
    pub supports_fencing: bool,
    /// Which clock decides expiry.
    pub time_authority: TimeAuthority,
    /// How the tickets of new places in line are numbered ([`TicketOrder::PerLine`] unless
    /// [`with_tickets`](Capabilities::with_tickets) says otherwise).
    pub tickets: TicketOrder,
}

impl Capabilities {
    /// Capabilities of a backend named `backend`.
    pub fn new(
        backend: &'static str,
        supports_fencing: bool,
        time_authority: TimeAuthority,
    ) -> Self {
        Capabilities {
            backend,
            supports_fencing,
            time_authority,
            tickets: TicketOrder::PerLine,
        }
    }

    /// These capabilities with new places' tickets numbered by `tickets`.
    pub fn with_tickets(mut self, tickets: TicketOrder) -> Self {
        self.tickets = tickets;
        self
    }
}

/// A held lock, as returned by a successful acquire.
#[derive(Clone, PartialEq, Eq)]
pub struct Lease {
    /// The handle for release, extend and ownership checks. Keep it secret: whoever has it can
    /// release the lock.
    pub lock_id: String,
    /// The fencing token of this acquisition.
    pub fence: Fence,
    /// When the lock expires, in Unix ms of the backend's time authority.
    pub expires_at_ms: i64,
}

impl fmt::Debug for Lease {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Lease")
            .field("lock_id_hash", &hash_key(&self.lock_id))
            .field("fence", &self.fence)
            .field("expires_at_ms", &self.expires_at_ms)
            .finish()
    }
}

/// The answer to [`Driver::try_acquire`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an acquired lease stays held until released or expired"]
pub enum Acquisition {
    /// The lock is now held.
    Acquired {
        /// The lease, as a lock user sees it.
        lease: Lease,
        /// The store's version of the lock record, if it has one (a Firestore document's
        /// update time): given back in [`LeaseRef`]s so the store can check it went unchanged.
        version: Option<Version>,
    },
    /// Someone else holds a live lock on the key.
    Locked,
}

impl Acquisition {
    /// The lock is now held under `lock_id`, with `fence`, until `expires_at_ms`.
    pub fn granted(
        lock_id: String,
        fence: Fence,
        expires_at_ms: i64,
        version: Option<Version>,
    ) -> Acquisition {
        Acquisition::Acquired {
            lease: Lease {
                lock_id,
                fence,
                expires_at_ms,
            },
            version,
        }
    }
}

/// [`Driver::try_acquire_all`] for a store without a native one: each key in the set's order
/// with [`Driver::try_acquire`], and on the first refusal every key taken so far given back
/// before answering [`Acquisitions::Locked`]. All or none as the caller sees it, but not at
/// one instant: another caller may find some of the keys held for the moment between.
///
/// A waiter stands in line on the key that refused it, with its one ticket
/// ([several keys](admit_all)): each key is asked with
/// [`Line::WaitAt`]; at the first refusal, before the waiter has a ticket, the refusing key's
/// line gives it one ([`Line::Wait`], then [`Driver::find_line`] reads it back). Each attempt
/// stops at its first refused key, so a waiter takes its places one refusal at a time.
///
/// A failure ends the attempt after the keys taken are given back; a give-back that fails is
/// reported as an acquisition in doubt of that lock id (its caller releases it later).
pub fn acquire_one_by_one<D: Driver + ?Sized>(
    driver: &D,
    keys: &KeySet,
    ttl: Ttl,
    holder: Option<&Holder>,
    line: Line<'_>,
) -> Result<Acquisitions> {
    let mut taken = Vec::with_capacity(keys.len());
    for key in keys {
        match driver.try_acquire(key, ttl, holder, line) {
            Ok(Acquisition::Acquired { lease, version }) => taken.push((lease, version)),
            Ok(Acquisition::Locked) => {
                if let Some((failure, unreleased)) = give_back(driver, keys, &taken) {
                    return Err(LockError::new(
                        failure.code(),
                        format!(
                            "giving back a key taken with others failed: {}",
                            failure.message()
                        ),
                    )
                    .in_doubt_all(unreleased));
                }
                let ticket = match (line.place(), line.ticket()) {
                    (Some(place), None) => driver
                        .find_line(key, LeaseKind::Lock)?
                        .iter()
                        .find(|stood| stood.place_id == place.as_str())
                        .map(|stood| stood.ticket),
                    (_, ticket) => ticket,
                };
                return Ok(Acquisitions::Locked { ticket });
            }
            Err(error) => {
                // The failed key's own doubt (if any) and every key that could not be given
                // back are all in doubt: the caller releases each later.
                let Some((_, unreleased)) = give_back(driver, keys, &taken) else {
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

/// Releases the leases `taken` for the first keys of `keys` (in the set's order), which a set
/// acquisition took and will not keep: every one is tried. `None` when all were given back;
/// else the first failure and every (key, lock id) that was not — what the acquisition's error
/// reports in doubt ([`LockError::in_doubt_all`]).
pub fn give_back<D: Driver + ?Sized>(
    driver: &D,
    keys: &KeySet,
    taken: &[(Lease, Option<Version>)],
) -> Option<(LockError, Vec<(String, String)>)> {
    let mut first_failure = None;
    let mut unreleased = Vec::new();
    for (key, (lease, version)) in keys.iter().zip(taken) {
        let Ok(lock_id) = LockId::new(&lease.lock_id) else {
            continue;
        };
        let given_back = LeaseRef::new(&lock_id)
            .with_key(key)
            .with_kind(LeaseKind::Lock)
            .with_version(version.as_ref());
        if let Err(error) = driver.release_lease(given_back) {
            first_failure.get_or_insert(error);
            unreleased.push((key.to_string(), lease.lock_id.clone()));
        }
    }
    first_failure.map(|failure| (failure, unreleased))
}

/// The answer to [`Driver::try_acquire_all`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "acquired leases stay held until released or expired"]
pub enum Acquisitions {
    /// Every key is now held: a lease and the store's version of its record per key, in the
    /// order of the [`KeySet`].
    Acquired(Vec<(Lease, Option<Version>)>),
    /// Some key is held by someone else (or its line goes first): none is held for this call.
    Locked {
        /// The ticket of the waiter's places, when it stands in line after this refusal
        /// ([`Line::Wait`] or [`Line::WaitAt`] asked): its next attempts ask [`Line::WaitAt`]
        /// with it. `None` when it took no place.
        ticket: Option<u64>,
    },
}

impl From<Acquisition> for Acquisitions {
    /// One key's answer as a set of one.
    fn from(acquisition: Acquisition) -> Self {
        match acquisition {
            Acquisition::Acquired { lease, version } => {
                Acquisitions::Acquired(vec![(lease, version)])
            }
            Acquisition::Locked => Acquisitions::Locked { ticket: None },
        }
    }
}

/// Which lease a release or extension is about. The lock id always; the key and the store's
/// [`Version`] when the holder knows them (a [`LockGuard`](crate::LockGuard) does), so a store
/// can go straight to the record instead of finding it by lock id first. A driver must still
/// check the stored lock id: the key and version are hints for speed, never proof of ownership.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LeaseRef<'a> {
    /// The lock id the lease was granted under.
    pub lock_id: &'a LockId,
    /// The key, when known.
    pub key: Option<&'a Key>,
    /// The store's version of the record as last seen, when known.
    pub version: Option<&'a Version>,
    /// A lock, or a permit of a semaphore ([`permit`](LeaseRef::permit)).
    pub kind: LeaseKind,
}

impl<'a> LeaseRef<'a> {
    /// A lease known only by its lock id (as from `syncguard release --lock-id`).
    pub fn new(lock_id: &'a LockId) -> Self {
        LeaseRef {
            lock_id,
            key: None,
            version: None,
            kind: LeaseKind::Lock,
        }
    }

    /// A permit of the semaphore on `key`, granted under `lock_id`: a permit is found by
    /// both.
    pub fn permit(lock_id: &'a LockId, key: &'a Key) -> Self {
        LeaseRef {
            kind: LeaseKind::Permit,
            ..LeaseRef::new(lock_id).with_key(key)
        }
    }

    /// A shared hold of the lock on `key`, granted under `lock_id`: found by both.
    pub fn shared(lock_id: &'a LockId, key: &'a Key) -> Self {
        LeaseRef {
            kind: LeaseKind::Shared,
            ..LeaseRef::new(lock_id).with_key(key)
        }
    }

    /// The key of a permit or a shared hold (`InvalidArgument` for one made without it by
    /// hand).
    pub fn permit_key(&self) -> Result<&'a Key> {
        self.key.ok_or_else(|| {
            crate::error::LockError::invalid_argument(
                "a permit or a shared hold is named by its key and its lock id; the key is missing",
            )
        })
    }

    /// With the key the lease was granted on.
    #[must_use]
    pub fn with_key(mut self, key: &'a Key) -> Self {
        self.key = Some(key);
        self
    }

    /// A lock or a permit ([`LeaseKind`]).
    #[must_use]
    pub fn with_kind(mut self, kind: LeaseKind) -> Self {
        self.kind = kind;
        self
    }

    /// With the store's version of the record.
    #[must_use]
    pub fn with_version(mut self, version: Option<&'a Version>) -> Self {
        self.version = version;
        self
    }
}

/// What a lease holds: a key's lock, one permit of the key's semaphore (stored apart; see
/// [`Driver::try_acquire_permit`]), or a shared hold of the key's lock
/// ([`Driver::try_acquire_shared`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LeaseKind {
    /// The lock on the key (held exclusively).
    #[default]
    Lock,
    /// A permit of the semaphore on the key: its [`LeaseRef`] always names the key.
    Permit,
    /// A shared hold of the lock on the key: its [`LeaseRef`] always names the key.
    Shared,
}

impl LeaseKind {
    /// The fence sequence and the line this kind of lease takes part in: a shared hold shares
    /// the lock's ([`Driver::try_acquire_shared`]).
    pub fn sequence(self) -> LeaseKind {
        match self {
            LeaseKind::Lock | LeaseKind::Shared => LeaseKind::Lock,
            LeaseKind::Permit => LeaseKind::Permit,
        }
    }
}

/// A heartbeat batch that may mix kinds of lease (locks, permits, shared holds), extended by a
/// store that keeps them apart: `extend` is called once per kind present, with that kind's
/// leases in the batch's order, and every answer is put back in its lease's place. `extend`
/// answers one result per lease it is given, in order.
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
pub(crate) fn extend_by_kind<'a>(
    leases: &[(LeaseRef<'a>, Ttl)],
    mut extend: impl FnMut(LeaseKind, &[(LeaseRef<'a>, Ttl)]) -> Vec<Result<Outcome<Extension>>>,
) -> Vec<Result<Outcome<Extension>>> {
    let Some(first) = leases.first() else {
        return Vec::new();
    };
    if leases.iter().all(|(lease, _)| lease.kind == first.0.kind) {
        return extend(first.0.kind, leases);
    }
    let mut answers = Vec::with_capacity(leases.len());
    for kind in [LeaseKind::Lock, LeaseKind::Permit, LeaseKind::Shared] {
        let positions: Vec<usize> = (0..leases.len())
            .filter(|&i| leases[i].0.kind == kind)
            .collect();
        if positions.is_empty() {
            continue;
        }
        let batch: Vec<(LeaseRef<'a>, Ttl)> = positions.iter().map(|&i| leases[i]).collect();
        answers.extend(positions.into_iter().zip(extend(kind, &batch)));
    }
    in_order(leases.len(), answers)
}

/// A heartbeat batch of leases that a store renews one key at a time (a key's permits or
/// readers kept in one record): `extend` is called once per key with that key's leases (lock
/// id and TTL, in the batch's order) and answers one result per lease, or one error for them
/// all; every answer is put back in its lease's place. A lease without a key is answered
/// `InvalidArgument`.
#[cfg(feature = "firestore")]
pub(crate) fn extend_by_key<'a>(
    leases: &[(LeaseRef<'a>, Ttl)],
    mut extend: impl FnMut(&'a Key, &[(&'a LockId, Ttl)]) -> Result<Vec<Result<Outcome<Extension>>>>,
) -> Vec<Result<Outcome<Extension>>> {
    let mut answers = Vec::with_capacity(leases.len());
    type Group<'a> = (&'a Key, Vec<(usize, &'a LockId, Ttl)>);
    let mut by_key: std::collections::BTreeMap<&str, Group<'a>> = std::collections::BTreeMap::new();
    for (i, (lease, ttl)) in leases.iter().enumerate() {
        match lease.permit_key() {
            Ok(key) => by_key
                .entry(key.as_str())
                .or_insert_with(|| (key, Vec::new()))
                .1
                .push((i, lease.lock_id, *ttl)),
            Err(error) => answers.push((i, Err(error))),
        }
    }
    for (key, group) in by_key.into_values() {
        let items: Vec<(&LockId, Ttl)> = group
            .iter()
            .map(|(_, lock_id, ttl)| (*lock_id, *ttl))
            .collect();
        let positions = group.iter().map(|(i, ..)| *i);
        match extend(key, &items) {
            Ok(outcomes) => answers.extend(positions.zip(outcomes)),
            Err(error) => answers.extend(positions.map(|i| {
                (
                    i,
                    Err(crate::error::LockError::new(error.code(), error.message())),
                )
            })),
        }
    }
    in_order(leases.len(), answers)
}

/// Extends `leases` one after another: [`Driver::extend_leases`]' default, and for a kind a
/// store renews no faster in a batch.
pub(crate) fn one_by_one<D: Driver + ?Sized>(
    driver: &D,
    leases: &[(LeaseRef<'_>, Ttl)],
) -> Vec<Result<Outcome<Extension>>> {
    leases
        .iter()
        .map(|(lease, ttl)| driver.extend_lease(*lease, *ttl))
        .collect()
}

/// The answers to a batch of `count` leases, given as `(position, answer)` pairs, in the
/// batch's order; a position without one is answered `Internal` (a store that skipped a lease
/// must not leave it looking renewed).
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
pub(crate) fn in_order(
    count: usize,
    answers: impl IntoIterator<Item = (usize, Result<Outcome<Extension>>)>,
) -> Vec<Result<Outcome<Extension>>> {
    let mut placed: Vec<Option<Result<Outcome<Extension>>>> = (0..count).map(|_| None).collect();
    for (position, answer) in answers {
        if let Some(slot) = placed.get_mut(position) {
            *slot = Some(answer);
        }
    }
    placed
        .into_iter()
        .map(|answer| {
            answer.unwrap_or_else(|| {
                Err(crate::error::LockError::internal(
                    "a lease of the batch was left unanswered",
                ))
            })
        })
        .collect()
}

/// The error of a driver without a shared mode.
fn no_shared_mode(capabilities: Capabilities) -> crate::error::LockError {
    crate::error::LockError::invalid_argument(format!(
        "the {} backend has no shared mode",
        capabilities.backend
    ))
}

/// The error of a driver without semaphores.
fn no_semaphores(capabilities: Capabilities) -> crate::error::LockError {
    crate::error::LockError::invalid_argument(format!(
        "the {} backend has no semaphores",
        capabilities.backend
    ))
}

/// A store's version of a lock record, opaque to everything but its driver (a Firestore
/// document's update time, say).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Version(String);

impl Version {
    /// Wraps the store's own representation.
    pub fn new(version: impl Into<String>) -> Self {
        Version(version.into())
    }

    /// The store's own representation.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Version({:?})", self.0)
    }
}

/// What a release or an extension did, and why not when it did nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use]
pub enum Outcome<T> {
    /// It took effect.
    Applied(T),
    /// No lock is stored under the lock id.
    NotFound,
    /// The lock was there but had expired (a release removed it).
    Expired,
    /// The record the lease named now holds another lock (a key or version that no longer
    /// matches the lock id).
    NotOwner,
}

impl<T> Outcome<T> {
    /// The value, if it took effect.
    pub fn applied(self) -> Option<T> {
        match self {
            Outcome::Applied(value) => Some(value),
            _ => None,
        }
    }

    /// Whether it took effect.
    pub fn is_applied(&self) -> bool {
        matches!(self, Outcome::Applied(_))
    }
}

/// A successful extension.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Extension {
    /// The new expiry, in Unix ms of the store's time authority.
    pub expires_at_ms: i64,
    /// The store's new version of the record, if it has versions.
    pub version: Option<Version>,
}

/// How [`Driver::find`] looks a lock up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Find<'a> {
    /// The lock on a key.
    Key(&'a Key),
    /// The lock stored under a lock id.
    LockId(&'a LockId),
}

/// A stored lock, raw: what [`Driver::find`] returns. Sanitised views
/// ([`LockInfo`](crate::LockInfo)) are made from it in one place.
#[derive(Clone, PartialEq, Eq)]
pub struct LockRecord {
    /// The (normalised) user key.
    pub key: String,
    /// The lock id.
    pub lock_id: String,
    /// Expiry, Unix ms of the store's time authority.
    pub expires_at_ms: i64,
    /// Acquisition time, Unix ms of the store's time authority.
    pub acquired_at_ms: i64,
    /// The fencing token of the acquisition.
    pub fence: Fence,
    /// Who holds it, as described when it was acquired ([`Holder`]); `None` when no
    /// description was given or the store keeps none (a lock the TypeScript SyncGuard took).
    pub holder: Option<String>,
}

impl fmt::Debug for LockRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LockRecord")
            .field("key", &self.key)
            .field("lock_id_hash", &hash_key(&self.lock_id))
            .field("expires_at_ms", &self.expires_at_ms)
            .field("acquired_at_ms", &self.acquired_at_ms)
            .field("fence", &self.fence)
            .field("holder", &self.holder)
            .finish()
    }
}

/// How a driver builds a listing's answer: here, with the records it is made of, so the
/// listing types need nothing from the driver.
impl LockList<LockRecord> {
    /// The list made of `found` — live records under the prefix, in any order, each lock (or
    /// permit) at most once — for a store that reads candidates unordered: sorted by key (then
    /// fence: a semaphore's permits share its key) and cut at `limit`. `exhausted` says whether
    /// the store read every candidate (else its work bound stopped it).
    pub fn from_unsorted(mut found: Vec<LockRecord>, limit: ListLimit, exhausted: bool) -> Self {
        found.sort_unstable_by(|a, b| a.key.cmp(&b.key).then(a.fence.cmp(&b.fence)));
        let mut list = LockList::from_sorted(found, limit);
        if !exhausted {
            list.coverage = Coverage::WorkBoundReached;
        }
        list
    }

    /// The list made of `found` — live records under the prefix, sorted by key (then fence) —
    /// read by a store in key order up to one more than `limit`: more than `limit` means the
    /// limit was reached.
    pub fn from_sorted(mut found: Vec<LockRecord>, limit: ListLimit) -> Self {
        let coverage = if found.len() > limit.get() {
            Coverage::LimitReached
        } else {
            Coverage::Complete
        };
        found.truncate(limit.get());
        LockList {
            locks: found,
            coverage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn records(keys: &[&str]) -> Vec<LockRecord> {
        keys.iter()
            .map(|key| LockRecord {
                key: (*key).to_owned(),
                lock_id: generate_lock_id(),
                expires_at_ms: 2,
                acquired_at_ms: 1,
                fence: Fence::from_counter(1).unwrap(),
                holder: None,
            })
            .collect()
    }

    fn keys(list: &LockList<LockRecord>) -> Vec<&str> {
        list.locks
            .iter()
            .map(|record| record.key.as_str())
            .collect()
    }

    #[test]
    fn unsorted_records_are_sorted_cut_and_covered() {
        let two = ListLimit::new(2).unwrap();
        let list = LockList::from_unsorted(records(&["c", "a", "b"]), two, true);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::LimitReached)
        );
        let list = LockList::from_unsorted(records(&["b", "a"]), two, true);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::Complete)
        );
        let list = LockList::from_unsorted(records(&["c", "a", "b"]), two, false);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::WorkBoundReached)
        );
        let list = LockList::from_sorted(records(&["a", "b", "c"]), two);
        assert_eq!(
            (keys(&list), list.coverage),
            (vec!["a", "b"], Coverage::LimitReached)
        );
    }
}
