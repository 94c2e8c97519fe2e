//! Multi-process audits: several worker processes, each with several threads, take one kind of
//! lock on a few keys through their own `Locker`s and log every hold; the parent then checks
//! from the outside what no single call can show (never two holders, never a reader beside a
//! writer, never more permits than the semaphore has, fences that only grow).
//!
//! The module is named so that its tests, the longest of the run, start first: libtest starts
//! tests in name order.

// Locks on two keys with faults injected (Redis and PostgreSQL).
#[cfg(all(feature = "redis", feature = "postgres"))]
mod lock;
// One test per backend, each under its own feature.
mod rw;
// One test per backend, each under its own feature.
mod semaphore;
// What the reader-writer and semaphore audits share.
mod holds;
mod workers;
