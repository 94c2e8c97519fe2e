//! The Firestore backend: Firestore's v1 REST API over a blocking HTTP/1.1 client of its own
//! that logs nothing, since every request carries a secret (no gRPC, no async runtime), atomic
//! compare-and-set commits of at most two HTTP requests per operation, client time with the
//! 1000 ms tolerance and clock-skew monitoring, and the documents the TypeScript SyncGuard
//! uses.
//!
//! ```no_run
//! use syncguard::{Locker, firestore::FirestoreBackend};
//!
//! // With FIRESTORE_EMULATOR_HOST set this talks to the emulator; otherwise to Google, with
//! // Application Default Credentials (GOOGLE_APPLICATION_CREDENTIALS, gcloud's well-known file,
// then the metadata server).
//! let locker = Locker::new(FirestoreBackend::connect("firestore://my-project")?);
//! let guard = locker.lock("nightly-report")?;
//! println!("fence {}", guard.fence());
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! # Documents
//!
//! In collection `locks`, document `msk("", key)` (see [`make_storage_key`], limit 1500 bytes):
//! `lockId` (string), `expiresAtMs` and `acquiredAtMs` (integer), `key` (string), `fence`
//! (string, 15 digits), and `holder` (string) when the holder described itself
//! ([`LockOptions::holder`](crate::LockOptions::holder); the TypeScript SyncGuard writes no
//! such field and ignores it). In `fence_counters`, document `msk("", "fence:" + lock doc id)`:
//! `fence` (string, 15 digits) and `keyDebug` (string); never deleted. Once a waiter has
//! waited in the lock's line ([`Line`](crate::driver::Line)), it also holds that line:
//! `lineTicket` (integer, the last ticket issued) and `line` (array, in ticket order, of maps
//! `placeId` (string), `ticket` and `expiresAtMs` (integers: Firestore's time, not the
//! client's, so that clients' skew cannot reorder the line; `skew.rs`), and `holder` (string)
//! when given). The TypeScript SyncGuard knows no line: its acquisitions pass it, and set the
//! counter document whole, which clears it (the waiters take new places at their next
//! attempt). The lock's shared holders ([`Mode::Shared`]) are kept there too:
//! `readers`, a string holding a JSON array of objects `lockId`, `fence`, `expiresAtMs`,
//! `acquiredAtMs` and `holder` (when given), at most [`MAX_READERS`] live ones (see
//! `docs/firestore.md`); the TypeScript SyncGuard neither reads nor keeps it, and takes the lock
//! while readers hold. A document id Firestore
//! would reject (containing `/`, `.` or `..`, or of the form `__…__`) is replaced by its hashed
//! form, step 4 of [`make_storage_key`].
//!
//! In `<collection>_semaphores` (`locks_semaphores` by default; the configured lock collection's
//! name with `_semaphores` appended), one document per semaphore
//! ([`Mode::Permit`](crate::driver::Mode::Permit)), its id derived from the key as a lock
//! document's is (`msk("", key)`, hashed where Firestore would reject it): `key` (string),
//! `fence` (string, 15 digits: the last fence the semaphore issued, its own sequence),
//! and `permits` (array, in fence order) of maps `lockId` (string), `fence` (string, 15
//! digits), `expiresAtMs` and `acquiredAtMs` (integer), and `holder` (string) when given; and
//! the semaphore's line, as the counter document holds the lock's (`lineTicket`, `line`). A
//! semaphore is never deleted (its counter lives in it); expired permits are dropped by the
//! next write to it. At most 1000 permits of about 100 bytes (under 400 with a 256-byte
//! holder) stay well under Firestore's 1 MiB document limit. The TypeScript SyncGuard has no semaphores and never reads this
//! collection; a semaphore of one permit on `"k"` is not the lock on `"k"`: neither sees, blocks
//! or fences the other, and lock cleanups and listings never touch semaphore documents.
//!
//! [`make_storage_key`]: crate::driver::make_storage_key
//! [`Mode::Shared`]: crate::driver::Mode::Shared
//!
//! # Requests and atomicity
//!
//! Every mutation but a break is a compare-and-set: a read, then one `commit` whose writes carry
//! `currentDocument` preconditions (the `updateTime` that was read, or "does not exist"). A
//! commit's writes are atomic, and the preconditions make it apply only to exactly the state
//! that was checked — the same guarantee as a read-write transaction, without holding document
//! locks: Firestore's server-side transactions lock what they read, and under contention the
//! waiting readers starve the holder's release (observed on the emulator: releases aborted
//! five times in a row with seven contenders). A break is the one exception (below): it must
//! win against a holder that renews back to back, which a compare-and-set cannot.
//!
//! acquire: `batchGet` of the lock and counter documents (the line with them), then `commit`
//! of both (one request when the lock is visibly held; a lost race is reported as held). A
//! waiter in line ([`Line::Wait`](crate::driver::Line::Wait)) refused writes its place (taken
//! or renewed) into the counter document in one commit instead, and reads again after a lost
//! race, as does a waiter whose grant lost one (see `docs/firestore.md` for every count); its
//! answer says how many live places stand ahead of its own, as the line decided in the client
//! ([`Places::admit`](crate::driver::Places::admit)) counts them.
//! acquire of several keys: one `batchGet` of every key's lock and counter documents, then
//! one `commit` of all of them, all or none (`lock_set.rs`).
//! find_line: one `batchGet`; leave_line: `batchGet`, then `commit` when the place is there. release and extend:
//! `runQuery` for `lockId == id` (without a limit: two matches would be an inconsistency,
//! reported and left alone), then `commit` (a lost race is retried). is_locked and lookup: one
//! read. A commit that meets a TypeScript client's transaction (`ABORTED`) is retried a few
//! times with jitter, then `ServiceUnavailable`.
//!
//! A lock's renewal that replaces the holder text (a leader's proclaim,
//! [`LeaseRef::with_holder`](crate::driver::LeaseRef::with_holder)) is the same request as a
//! renewal, its write setting `holder` beside `expiresAtMs`; a plain renewal writes
//! `expiresAtMs` alone, as the TypeScript SyncGuard's does.
//!
//! break ([`Driver::break_leases`](crate::driver::Driver::break_leases)): one read-write
//! transaction (`beginTransaction`, `batchGet` in it, `commit` with it; `rollback` when there
//! is nothing to break), so that a renewal coming between the break's read and its commit
//! waits for the break and then finds its lease gone, instead of failing the break's commit at
//! every attempt. A lock's: its lock and counter documents read, then the marker's lock
//! document (a whole TypeScript-format lock, the operator's note as `holder`) in place of the
//! broken one and the counter at the marker's fence — or, without a marker, the lock
//! document's delete; permits' and shared holders' is a change to their document as any other
//! (below), made alone in the transaction, which moves the document's own counter. A commit
//! without a usable answer is read again and recognises its own markers.
//! Nothing announces a break (there is no release watch): waiters see it at their next poll.
//!
//! Semaphores: every operation reads the semaphore's document (`batchGet`) and commits it
//! whole, conditioned on its `updateTime` (or its absence): acquire (expired permits reclaimed,
//! a permit added if fewer than N are live), release, and renewal are one read and one commit
//! each, and a batch renewal ([`Driver::extend_leases`](crate::driver::Driver::extend_leases))
//! renews all its permits of one semaphore in one commit. A commit that lost a race to another
//! writer of the same semaphore (or met a transaction) reads again, at most 12 times, then
//! `ServiceUnavailable`: a permit is never granted twice nor lost. An acquisition whose commit
//! may have been applied is read again once: it answers the permit it finds under its own lock
//! id; only when that read fails too is it [in doubt](crate::LockError::in_doubt), as a lock's
//! is. The changes one backend makes to one semaphore at the same time share a commit (see
//! `docs/firestore.md`). Permits carry no version (every write to the semaphore changes it).
//! Firestore has no release watch: waiters for a permit poll.
//!
//! list ([`LockBackend::list`](crate::LockBackend::list)): `runQuery` on a range of the `key`
//! field, ordered by it (the automatic single-field index serves it), liveness by the client
//! clock, in pages of `limit + 1` documents, at most [`MAX_LIST_PAGES`] pages; a listing that
//! runs out answers what it found, with
//! [`Coverage::WorkBoundReached`](crate::Coverage::WorkBoundReached).
//!
//! list of permits or shared holds ([`LockBackend::list`](crate::LockBackend::list) with
//! [`LeaseKind::Permit`](crate::LeaseKind::Permit) or
//! [`LeaseKind::Shared`](crate::LeaseKind::Shared)): the same query and pages on the semaphore
//! collection (or the fence counter collection, by its `keyDebug` field), each document read
//! whole and turned into its live permits (or readers; fence order), until more than `limit`
//! are found, the range ends, or [`MAX_LIST_PAGES`] pages of `limit + 1` documents were read
//! (semaphores without live permits, never deleted, take room in a page).
//!
//! # Time
//!
//! The client clock decides expiry, as in the TypeScript SyncGuard; keep clocks synchronised.
//! Every answer's server time feeds [`FirestoreBackend::clock_skew`]; skew of 200 ms or more is
//! logged, and [`FirestoreBuilder::max_clock_skew`] makes operations fail above a bound.
//!
//! # Errors
//!
//! By the answer's `status`: UNAVAILABLE, INTERNAL, ABORTED → `ServiceUnavailable`;
//! DEADLINE_EXCEEDED and client timeouts → `NetworkTimeout`; PERMISSION_DENIED,
//! UNAUTHENTICATED and token-exchange failures → `AuthFailed`; INVALID_ARGUMENT,
//! FAILED_PRECONDITION → `InvalidArgument` (a missing `lockId` index is named);
//! RESOURCE_EXHAUSTED → `RateLimited`; anything else → `Internal`. Refused connections,
//! unresolved host names and TLS failures → `ServiceUnavailable`.
//!
//! A `200` answer is checked for shape before it is believed. An `{"error": …}` element in it
//! (a `runQuery` or `batchGet` stream that failed part-way) is that error, coded by its status
//! as above. A body that is not JSON, or JSON that is not the call's answer (an object for an
//! array, a document without `name` or `updateTime`, a `batchGet` that does not account for
//! every document asked for, a commit without `writeResults` or `commitTime`) →
//! `ServiceUnavailable`, transient: such an answer is most likely a proxy's or a cut-short one,
//! and it never reads as "no lock" — only a `batchGet`'s `missing`, or a `runQuery` stream of
//! bare read times, says a lock is absent.
//!
//! A lock document that is not a SyncGuard lock record (a field missing or of another type, a
//! fence that is not 15 digits, an expiry that is not an integer from 0 to 2^53 − 1) is
//! stored data, the same on every read: every operation answers it with `Internal` naming the
//! key, never "locked" and never "absent", and writes nothing over it. Extra fields are
//! tolerated. A fence counter that is not 15 digits, or at the limit, stops acquire with
//! `Internal` naming the key before the commit.
//!
//! An acquisition whose commit may have been applied although no answer says so (a timeout, a
//! connection lost after the request, an unusable `200`, a status such as UNAVAILABLE or
//! DEADLINE_EXCEEDED) fails with the error marked [in doubt](crate::LockError::in_doubt), carrying
//! the lock id the commit wrote: releasing that lock id frees the key if it was taken (the
//! [`Locker`](crate::Locker) does so). A refusal, or a request never sent (connection refused,
//! no token), is not in doubt.
//!
//! A guard's release whose write meets such a failure (or a refused or lost connection) is
//! tried once more by lock id, which re-reads and decides; if the first write did go through,
//! the lock is gone by then, while it would still be live: only that write removes a live lock,
//! so the release answers `true` (removed) and wakes the `Locker`'s waiters. A permit's release
//! judges the same way.
//!
//! Messages name the endpoint (`firestore.googleapis.com`, or the emulator's `host:port`), the
//! project and the database, and keep the cause: `Firestore at 127.0.0.1:8080 (project p,
//! database (default)) answered HTTP 503 UNAVAILABLE: …`. They never contain a token.
//!
//! # TLS
//!
//! Requests to Google trust the system's root certificates (not a bundled list), so a
//! TLS-inspecting proxy whose CA is installed system-wide works as it does for every other
//! program (the proxy is taken from `HTTPS_PROXY` or `ALL_PROXY`, `http://` proxies only, with
//! `NO_PROXY` honoured). A CA that is not installed — a PEM file of one or more certificates —
//! is added with [`FirestoreBuilder::tls_ca_file`]
//! or `?tls_ca_file=PATH` in the URL, for Firestore's requests and the token requests of
//! every kind of credentials alike. Verification is always full (chain and host name). The
//! crypto provider (*ring*) is given to each HTTP agent: rustls' process-wide default is never
//! read or changed. The Redis and PostgreSQL backends follow the same policy. A certificate
//! that is not trusted fails with `ServiceUnavailable`: `cannot reach Firestore at
//! firestore.googleapis.com (project p, database (default)): TLS failure: the server's
//! certificate is not trusted (unknown issuer): …`. The emulator is plain HTTP.

mod auth;
mod breaking;
mod builder;
mod combiner;
mod commit;
mod counter_doc;
mod document;
mod driver;
mod held;
mod holders;
mod holders_break;
mod line_doc;
mod list;
mod lock_line;
mod lock_set;
mod lock_take;
mod readers_doc;
mod rest;
mod semaphore;
mod semaphore_change;
mod semaphore_doc;
mod skew;
mod timestamp;
mod transaction;
mod transport;

pub use self::auth::{Credentials, TokenProvider};
pub use self::builder::FirestoreBuilder;
pub use self::document::STORAGE_KEY_LIMIT;
pub use self::driver::{ASSUMED_SKEW_MS, CLEANUP_GUARD_MS, FirestoreBackend, FirestoreStats};
pub use self::list::MAX_LIST_PAGES;
pub use self::readers_doc::MAX_READERS;
pub use self::skew::ClockSkew;
