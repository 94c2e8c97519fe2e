//! Distributed locks for threaded and batch programs: blocking calls, fencing tokens, TTL
//! leases, guards that release on drop, and a shared heartbeat that keeps long jobs' leases
//! alive and tells you when one is lost.
//!
//! ```
//! use syncguard::{Locker, MemoryBackend};
//!
//! let locker = Locker::new(MemoryBackend::new()); // or a Redis / PostgreSQL / Firestore backend
//! let guard = locker.lock("nightly-report")?;     // waits until held, like Mutex::lock
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
//! runtime, and it works the same from `main`, a worker pool or a test. Called from a thread
//! inside an async runtime, a call blocks that thread and never panics (the PostgreSQL backend
//! drives its connections from an I/O thread of its own); in async code prefer
//! `spawn_blocking`, as for any blocking call.
//!
//! # The pieces
//!
//! - [`LockBackend`]: single-attempt operations against one store — [`MemoryBackend`] (in
//!   process; the embedded default and a test double), Redis, PostgreSQL, Firestore
//!   ([`connect`] picks one from a URL). Storage formats are those of the TypeScript SyncGuard,
//!   so Rust and Node services can share locks. A backend implements the small
//!   [`driver::Driver`] trait; everything a lock user calls is written once on top of it.
//! - [`Locker`]: retries with exponential backoff and jitter, hands out [`LockGuard`]s, and runs
//!   one heartbeat (a scheduler thread and at most four workers) that renews every held lease
//!   in batches (on the schedule of [`Heartbeat::Auto`] by default).
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
//! The default build is the core and [`MemoryBackend`], with a handful of small dependencies.
//! Each backend is a feature to opt into, and brings its client libraries only when enabled:
//!
//! - `redis`: `RedisBackend` (`redis`, `r2d2`, rustls).
//! - `postgres`: `PostgresBackend` (`postgres`, `tokio-postgres`, `r2d2_postgres`,
//!   rustls).
//! - `firestore`: `FirestoreBackend` over the REST API (its own HTTP/1.1 client, rustls,
//!   `jsonwebtoken`; service-account assertions are signed RS256 with *ring*, the crypto
//!   library rustls uses here).
//! - `cli`: the `syncguard` command, with all three backends.
//! - `testing`: the contract suite (`syncguard::testing`) for the tests of a backend written
//!   elsewhere.
//! - `metrics`: every [`Locker`] records what its acquisitions and leases lived through under
//!   fixed `syncguard_*` names through the `metrics` facade (the facade only; the program
//!   installs the recorder or exporter, before making its `Locker`s): see `syncguard::metrics`
//!   and `examples/metrics.rs`. Without it, an application
//!   can still attach its own [`observe::LockObserver`]s.
//!
//! ```toml
//! [dependencies]
//! syncguard = { version = "0.1", features = ["redis"] }
//! ```
//!
//! [`connect`] with a URL whose backend is not compiled in says which feature to enable.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod backend;
mod cancel;
mod connect;
#[macro_use]
pub mod driver;
#[cfg(feature = "redis")]
mod duration;
mod error;
mod fence;
mod hash;
mod holder;
mod key;
mod key_set;
mod line;
mod listing;
mod lock_id;
mod locker;
mod memory;
#[cfg(feature = "metrics")]
pub mod metrics;
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
mod net;
pub mod observe;
mod permits;
#[cfg(any(feature = "redis", feature = "postgres"))]
mod pool_options;
mod telemetry;
mod time;
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
mod tls;

#[cfg(feature = "firestore")]
pub mod firestore;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "redis")]
pub mod redis;
#[cfg(feature = "testing")]
pub mod testing;

pub use crate::backend::{
    AcquireOutcome, LockBackend, LockInfo, LockInfoDebug, Lookup, PlaceInfo, get_by_id,
    get_by_id_raw, get_by_key, get_by_key_raw, list_locks, list_locks_raw, owns,
};
pub use crate::cancel::CancelToken;
pub use crate::connect::connect;
pub use crate::driver::{Capabilities, Lease, LeaseKind, Mode, TimeAuthority};
pub use crate::error::{ErrorCode, LockError, Result};
pub use crate::fence::Fence;
pub use crate::listing::{Coverage, DEFAULT_LIST_LIMIT, LockList, MAX_LIST_LIMIT};
pub use crate::locker::breaking::BreakOptions;
pub use crate::locker::lead::LeadOptions;
pub use crate::locker::leader_watch::LeaderWatch;
pub use crate::locker::leadership::{Leader, Leadership};
pub use crate::locker::multi_lock::MultiLockGuard;
pub use crate::locker::rw_lock::RwLock;
pub use crate::locker::semaphore::Semaphore;
pub use crate::locker::watch::{BreakInfo, KeyState, WATCH_POLL_INTERVAL, Watch};
pub use crate::locker::{Backoff, Heartbeat, Jitter, LockGuard, LockOptions, Locker};
pub use crate::memory::MemoryBackend;
pub use crate::telemetry::{
    EventResult, FailureReason, LockEvent, LockOp, Telemetry, TelemetryOptions, with_telemetry,
};
pub use crate::time::{Clock, ManualClock, SystemClock};

/// The examples of the README and of the reference it links to (`docs/*.md`), compiled and
/// run as doctests so they stay true. Each page is one item; a backend's page needs its
/// feature, and its examples that need a server are `no_run`.
#[cfg(doctest)]
mod doc_examples {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/guide.md")]
    struct Guide;
    #[doc = include_str!("../docs/errors.md")]
    struct Errors;
    #[doc = include_str!("../docs/backends.md")]
    struct Backends;
    #[cfg(feature = "redis")]
    #[doc = include_str!("../docs/redis.md")]
    struct Redis;
    #[cfg(feature = "postgres")]
    #[doc = include_str!("../docs/postgres.md")]
    struct Postgres;
    #[cfg(feature = "firestore")]
    #[doc = include_str!("../docs/firestore.md")]
    struct Firestore;
    #[doc = include_str!("../docs/compatibility.md")]
    struct Compatibility;
    #[doc = include_str!("../docs/reliability.md")]
    struct Reliability;
    #[doc = include_str!("../docs/cli.md")]
    struct Cli;
    #[doc = include_str!("../docs/troubleshooting.md")]
    struct Troubleshooting;
    #[doc = include_str!("../docs/benchmarks.md")]
    struct Benchmarks;
    #[doc = include_str!("../docs/development.md")]
    struct Development;
}
