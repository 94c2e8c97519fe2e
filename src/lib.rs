//! Distributed locks for threaded and batch programs: blocking calls, fencing tokens, TTL
//! leases, guards that release on drop, and one heartbeat thread that keeps long jobs' leases
//! alive and tells you when one is lost.
//!
//! ```
//! use syncguard::{Locker, MemoryBackend};
//!
//! let locker = Locker::new(MemoryBackend::new()); // or a Redis / PostgreSQL / Firestore backend
//! let guard = locker.lock("nightly-report")?;     // waits with backoff, up to 5 s by default
//! println!("fence {}", guard.fence());            // pass it to what the lock protects
//! guard.check()?;                                 // Err(LockLost) if the lease was lost
//! drop(guard);                                    // releases the lock
//!
//! let rows = locker.with_lock("nightly-report", |_guard| 42)?; // acquire, run, release
//! assert_eq!(rows, 42);
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! # Why blocking
//!
//! The users of this crate run thread-per-task programs, cron and batch jobs. For them an async
//! runtime would be a dependency with nothing to do: a lock is taken once per job, the call
//! waits for the network anyway, and the work under the lock is usually blocking I/O. So every
//! call here blocks the calling thread, with a timeout on every network call; nothing needs a
//! runtime, and it works the same from `main`, a worker pool or a test. From inside an async
//! program, call it through `spawn_blocking` (or a thread of your own): the PostgreSQL backend
//! drives each connection with a private single-threaded runtime, as the `postgres` crate does,
//! and such a runtime cannot run on an async runtime's worker thread.
//!
//! # The pieces
//!
//! - [`LockBackend`]: single-attempt operations against one store — [`MemoryBackend`] (in
//!   process; the embedded default and a test double), Redis, PostgreSQL, Firestore
//!   ([`connect`] picks one from a URL). Storage formats are those of the TypeScript SyncGuard,
//!   so Rust and Node services can share locks.
//! - [`Locker`]: retries with exponential backoff and jitter, hands out [`LockGuard`]s, and runs
//!   one heartbeat thread that renews every held lease (at a third of its TTL by default).
//! - [`LockGuard`]: the held lock. [`LockGuard::fence`] is the fencing token; [`LockGuard::check`]
//!   says whether the lease is still held; dropping it releases.
//! - [`Fence`]: a 15-digit token that grows with each acquisition of a key. Have the protected
//!   store reject writes with a fence lower than the highest it has seen: a holder that stalled
//!   past its lease then cannot clobber its successor.
//!
//! # Guarantees and their limits
//!
//! A lease is a promise bounded by time. The heartbeat renews it well before it expires and
//! marks the guard lost when renewal finds the lock gone or keeps failing until the TTL is
//! over — the guard reports the loss no later than the lease would end. Between two checks a
//! paused process can still overrun its lease; fences make that harmless to stores that check
//! them.
//!
//! Errors are [`LockError`]s with a stable [`ErrorCode`]; contention is not an error
//! ([`AcquireOutcome::Locked`], `Ok(None)` from [`Locker::try_lock`]).
//!
//! # Features
//!
//! `redis`, `postgres`, `firestore` (default): the backends. `cli`: the `syncguard` command.

#![warn(missing_docs)]

mod backend;
mod cancel;
mod connect;
mod error;
mod fence;
mod key;
mod lock_id;
mod locker;
mod memory;
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
mod net;
mod telemetry;
mod time;

#[cfg(feature = "firestore")]
pub mod firestore;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;

pub use crate::backend::{
    AcquireOutcome, Capabilities, FailureReason, Lease, LockBackend, LockInfo, LockInfoDebug,
    Lookup, MutationOutcome, TimeAuthority, get_by_id, get_by_id_raw, get_by_key, get_by_key_raw,
    owns,
};
pub use crate::cancel::CancelToken;
pub use crate::connect::connect;
pub use crate::error::{ErrorCode, LockError, Result};
pub use crate::fence::{FENCE_DIGITS, FENCE_MAX, FENCE_WARN_THRESHOLD, Fence};
pub use crate::key::{
    MAX_KEY_LENGTH_BYTES, hash_key, make_storage_key, normalize_and_validate_key,
};
pub use crate::lock_id::{LOCK_ID_LENGTH, generate_lock_id, validate_lock_id};
pub use crate::locker::{Backoff, Heartbeat, Jitter, LockGuard, LockOptions, Locker};
pub use crate::memory::MemoryBackend;
pub use crate::telemetry::{
    EventResult, LockEvent, LockOp, Telemetry, TelemetryOptions, with_telemetry,
};
pub use crate::time::{
    Clock, MAX_TTL_MS, ManualClock, SystemClock, TIME_TOLERANCE_MS, is_live, ttl_to_ms,
};

/// The README's examples, compiled and run as doctests so they stay true. The README
/// describes the default build, so they need the default features.
#[cfg(all(
    doctest,
    feature = "redis",
    feature = "postgres",
    feature = "firestore"
))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
