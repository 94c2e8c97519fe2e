//! The `line-load` scenario: what a key's waiters cost the store while the key stays held.
//!
//! One `Locker` holds a key; `--waiters` threads of another `Locker` (its own connections, as
//! another process would have) wait for it with the default options (in line, or barging with
//! `--line off`). After a second for them to line up, their acquisition attempts are counted
//! for `--seconds` (a counting wrapper around the waiters' driver: every request an attempt
//! sends is one `try_acquire`). The report gives the attempts per second, in all and per
//! waiter. Count the server's side around the run as well where it tells (Redis `INFO
//! commandstats`, PostgreSQL `pg_stat_database`, PgBouncer `SHOW STATS`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::Serialize;
use syncguard::driver::{Acquisitions, Driver, Request};
use syncguard::{CancelToken, ErrorCode, LockBackend, LockOptions, Locker};

/// How long the waiters get to line up before the count starts.
const LINE_UP: Duration = Duration::from_secs(1);

/// A driver that counts the acquisition attempts sent through it.
struct CountingAttempts {
    inner: Box<dyn LockBackend>,
    attempts: Arc<AtomicU64>,
}

impl Driver for CountingAttempts {
    fn try_acquire(&self, request: &Request<'_>) -> syncguard::Result<Acquisitions> {
        self.attempts.fetch_add(1, Ordering::Relaxed);
        self.inner.try_acquire(request)
    }

    syncguard::delegate_driver!(self, &self.inner; describe, release_lease, extend_leases,
        key_is_locked, find, list_records, find_line, leave_line, break_leases, watch_releases);
}

/// The scenario's JSON line.
#[derive(Serialize)]
pub struct Report {
    backend: &'static str,
    scenario: &'static str,
    line: bool,
    waiters: usize,
    seconds: f64,
    attempts: u64,
    attempts_per_s: f64,
    attempts_per_s_per_waiter: f64,
}

/// Holds `key` through `holder` while `waiters` waiters of a `Locker` on `waiting` (a second
/// connection to the same store) wait for it `duration` long; counts their attempts.
pub fn run(
    holder: &Locker<Box<dyn LockBackend>>,
    waiting: Box<dyn LockBackend>,
    key: &str,
    waiters: usize,
    line: bool,
    duration: Duration,
) -> syncguard::Result<Report> {
    let backend = holder.backend().capabilities().backend;
    let attempts = Arc::new(AtomicU64::new(0));
    let others = Locker::new(CountingAttempts {
        inner: waiting,
        attempts: Arc::clone(&attempts),
    });
    let held = holder.lock(key)?;
    let cancel = CancelToken::new();
    let options = LockOptions::default()
        .wait_in_line(line)
        .cancel(cancel.clone());
    let (counted, seconds) = std::thread::scope(|scope| {
        let threads: Vec<_> = (0..waiters)
            .map(|_| scope.spawn(|| others.lock_with(key, &options)))
            .collect();
        std::thread::sleep(LINE_UP);
        let from = attempts.load(Ordering::Relaxed);
        let start = Instant::now();
        std::thread::sleep(duration);
        let counted = attempts.load(Ordering::Relaxed) - from;
        let seconds = start.elapsed().as_secs_f64();
        cancel.cancel();
        let mut outcome = Ok(());
        for thread in threads {
            match thread.join() {
                Ok(Err(error)) if error.code() == ErrorCode::Aborted => {}
                Ok(Err(error)) => outcome = Err(error),
                Ok(Ok(_)) => {
                    outcome = Err(syncguard::LockError::internal(
                        "a waiter took a lock that stayed held",
                    ))
                }
                Err(_) => outcome = Err(syncguard::LockError::internal("a waiter panicked")),
            }
        }
        outcome.map(|()| (counted, seconds))
    })?;
    held.release()?;
    let attempts_per_s = counted as f64 / seconds;
    Ok(Report {
        backend,
        scenario: "line-load",
        line,
        waiters,
        seconds: (seconds * 100.0).round() / 100.0,
        attempts: counted,
        attempts_per_s: (attempts_per_s * 10.0).round() / 10.0,
        attempts_per_s_per_waiter: (attempts_per_s / waiters as f64 * 100.0).round() / 100.0,
    })
}
