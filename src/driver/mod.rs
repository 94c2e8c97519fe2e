//! Writing a backend: the [`Driver`] trait, the validated values it is given, the outcomes it
//! returns (among them the [`Lease`] it grants and its [`Capabilities`]), and the toolkit every
//! store shares with the TypeScript SyncGuard (storage keys, liveness, TTLs, limits).
//!
//! A driver is a store's protocol and nothing else: eleven methods, one per thing a store does —
//! one acquisition ([`Request`]: the keys, a [`Mode`], the TTL, the holder, the line), release
//! and extension by [`LeaseRef`], the reads by key (or prefix) and [`LeaseKind`], the line, an
//! operator's forced release ([`BreakOrder`]), and the watch for releases. Everything a lock user calls — the
//! [`LockBackend`](crate::LockBackend) methods with their plain `&str`/`Duration` arguments and
//! `bool`/`Option` answers, sanitised lookups, [`get_by_key`](crate::get_by_key) and friends,
//! [`owns`](crate::owns), telemetry, and the [`Locker`](crate::Locker) with its guards and
//! heartbeat — is written once on top, for every driver; so is what a store lacks: a mode it
//! does not declare is refused, and several keys it cannot decide in one step are taken one at
//! a time ([`acquire`]). The same split as `lock_api`'s `RawMutex` under its `Mutex`, or r2d2's
//! `ManageConnection` under its `Pool`.
//!
//! What the types guarantee, so a driver need not check again:
//! - a [`Key`] is NFC-normalised and 1 to 512 bytes; a [`LockId`] has the lock-id shape; a
//!   [`Ttl`] is a whole number of milliseconds from 1 ms to [`MAX_TTL_MS`] (10^13 ms); a
//!   [`Holder`] is 1 to 256 bytes without control characters — all checked before any I/O,
//!   where they entered the crate; a [`Request`]'s keys are 1 to [`MAX_KEYS`] distinct ones in
//!   byte order, in a mode and number its store declared;
//! - a [`LeaseRef`] names a lease by its lock id and, when its holder knows them, its key and
//!   the [`Version`] the store reported for it, so a driver can go straight to the record.
//!
//! What a driver must guarantee (the contract suite, [`testing`](crate#features), checks it):
//! - liveness is [`is_live`] with [`TIME_TOLERANCE_MS`] against the store's time authority;
//!   expired and missing locks look the same to every caller;
//! - acquiring is atomic and issues a fence one above the key's last ([`Fence::from_counter`](crate::Fence::from_counter));
//!   fence counters are never deleted and never expire;
//! - releasing and extending resolve the lease, check that the stored lock is live and has its
//!   lock id, and mutate, in one atomic step; neither ever revives an expired lock, and an
//!   extension replaces the expiry with *now + ttl*;
//! - [`Driver::key_is_locked`], [`Driver::find`], [`Driver::list_records`] and
//!   [`Driver::find_line`] only read.
//!
//! ```
//! use std::collections::HashMap;
//! use std::sync::Mutex;
//! use syncguard::driver::*;
//! use syncguard::{Capabilities, Fence, Lease, LockBackend, TimeAuthority};
//!
//! /// A toy store: exclusive locks in one map, the client clock, no expiry sweeping.
//! #[derive(Default)]
//! struct Toy(Mutex<(HashMap<String, LockRecord>, HashMap<String, u64>)>);
//!
//! impl Toy {
//!     fn live(&self, by: Find<'_>) -> Option<LockRecord> {
//!         let now = SystemClock.now_ms();
//!         let state = self.0.lock().unwrap();
//!         state.0.values()
//!             .find(|r| match by {
//!                 Find::Key(k, _) => r.key == k.as_str(),
//!                 Find::LockId(id) => r.lock_id == id.as_str(),
//!             })
//!             .filter(|r| is_live(r.expires_at_ms, now, TIME_TOLERANCE_MS))
//!             .cloned()
//!     }
//! }
//!
//! impl Driver for Toy {
//!     fn describe(&self) -> Capabilities {
//!         Capabilities::new("toy", true, TimeAuthority::Client)
//!     }
//!     // One key, exclusive: all this store declares (the crate takes sets one key at a time).
//!     fn try_acquire(&self, request: &Request<'_>) -> syncguard::Result<Acquisitions> {
//!         let key = request.first_key();
//!         let now = SystemClock.now_ms();
//!         let mut state = self.0.lock().unwrap();
//!         let (locks, fences) = &mut *state;
//!         if locks.get(key.as_str()).is_some_and(|r| is_live(r.expires_at_ms, now, TIME_TOLERANCE_MS)) {
//!             return Ok(Acquisitions::locked_at(None));
//!         }
//!         let counter = fences.entry(key.to_string()).or_default();
//!         *counter += 1;
//!         let lease = Lease { lock_id: generate_lock_id(), fence: Fence::from_counter(*counter)?, expires_at_ms: now + request.ttl.as_millis() };
//!         locks.insert(key.to_string(), LockRecord {
//!             key: key.to_string(), lock_id: lease.lock_id.clone(), expires_at_ms: lease.expires_at_ms,
//!             acquired_at_ms: now, fence: lease.fence, holder: request.holder.map(|h| h.to_string()),
//!         });
//!         Ok(Acquisitions::granted(lease.lock_id, lease.fence, lease.expires_at_ms, None))
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
//!     fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<syncguard::Result<Outcome<Extension>>> {
//!         let now = SystemClock.now_ms();
//!         let mut state = self.0.lock().unwrap();
//!         leases.iter().map(|(lease, ttl)| {
//!             let Some(record) = state.0.values_mut().find(|r| r.lock_id == lease.lock_id.as_str()) else {
//!                 return Ok(Outcome::NotFound);
//!             };
//!             if !is_live(record.expires_at_ms, now, TIME_TOLERANCE_MS) {
//!                 return Ok(Outcome::Expired);
//!             }
//!             record.expires_at_ms = now + ttl.as_millis();
//!             Ok(Outcome::Applied(Extension { expires_at_ms: record.expires_at_ms, version: None }))
//!         }).collect()
//!     }
//!     fn key_is_locked(&self, key: &Key) -> syncguard::Result<bool> {
//!         Ok(self.live(Find::Key(key, LeaseKind::Lock)).is_some())
//!     }
//!     fn find(&self, by: Find<'_>) -> syncguard::Result<Vec<LockRecord>> {
//!         Ok(self.live(by).into_iter().collect())
//!     }
//! }
//!
//! // Every lock-user call comes with it:
//! let toy = Toy::default();
//! let lease = toy.acquire("job", std::time::Duration::from_secs(5))?.lease().unwrap();
//! assert!(toy.is_locked("job")?);
//! assert!(toy.release(&lease.lock_id)?);
//! assert!(toy.release("not a lock id").is_err()); // validated before the driver is called
//! assert!(toy.acquire_as("job", syncguard::Mode::Shared, std::time::Duration::from_secs(5)).is_err()); // no shared mode
//! # Ok::<(), syncguard::LockError>(())
//! ```

mod acquire;
mod batches;
mod breaking;
mod capabilities;
#[macro_use]
mod delegate;
mod ext;
mod lease;
mod records;
mod request;
mod seam;

pub(crate) use acquire::release_granted;
pub use acquire::{acquire, acquire_one_by_one};
#[cfg(feature = "firestore")]
pub(crate) use batches::extend_by_key;
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
pub(crate) use batches::extend_by_kind;
#[cfg(feature = "redis")]
pub(crate) use batches::in_order;
pub use breaking::{
    BreakDelay, BreakNote, BreakOrder, Broken, is_marker, marker_expiry, marker_lock_id,
};
pub use capabilities::{Capabilities, TimeAuthority};
pub use ext::DriverExt;
pub use lease::{Extension, Lease, LeaseKind, LeaseRef, Outcome, Version};
pub use records::{Find, LockRecord};
pub use request::{Acquisition, Acquisitions, Mode, Request};
pub use seam::{Driver, OnRelease, ReleaseWatch};

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
