//! The lease's keeper: one thread that renews `run`'s lease while the command runs, tells the
//! supervisor each new local deadline, and releases the lease at the end.
//!
//! `run` renews the lease itself (the library's heartbeat is off for it) because it must know
//! the lease's *local deadline* — the send time of the last renewal the store confirmed, plus
//! the TTL — to end the command's group `--grace` before it, and the library keeps that instant
//! to itself. The store counts a renewal from when it arrives, so it expires the record no
//! earlier than this deadline: a group killed by then is gone before anyone else can take the
//! lock. The library still watches its own deadline (it times each renewal a moment after `run`
//! does, so its deadline is never the earlier one) and reports the loss through `on_lock_lost`.

use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use syncguard::{LockBackend, LockGuard, Locker};

/// Shortest and longest pause before retrying a renewal that failed (the library's heartbeat
/// uses the same bounds).
const MIN_RETRY_GAP: Duration = Duration::from_millis(10);
const MAX_RETRY_GAP: Duration = Duration::from_secs(1);

/// Told the lease's new local deadline after each renewal the store confirmed.
pub type OnRenewed = Box<dyn Fn(Instant) + Send>;

/// The running keeper thread; [`Keeper::release_within`] ends it.
pub struct Keeper {
    stop: mpsc::Sender<()>,
    /// Told when the release begins: no renewal is in flight any more.
    releasing: mpsc::Receiver<()>,
    released: mpsc::Receiver<Released>,
    /// The lease's TTL: the longest a renewal in flight is waited for.
    ttl: Duration,
}

/// What the release at the end came to.
type Released = syncguard::Result<bool>;

/// What the keeper needs to know of the lease.
pub struct Schedule {
    /// The lease length each renewal asks for.
    pub ttl: Duration,
    /// How long after a confirmed renewal was sent the next one goes out.
    pub interval: Duration,
    /// When the last renewal the store confirmed (or the acquisition) was sent, or a moment
    /// before: never after, so that a deadline reckoned from it is never late.
    pub confirmed: Instant,
}

impl Keeper {
    /// Starts renewing `guard` on a thread of its own; `on_renewed` gets the lease's new local
    /// deadline after every renewal the store confirmed. `None` if the thread cannot start
    /// (the guard, dropped with the thread's closure, releases the lease then).
    pub fn start(
        guard: LockGuard,
        locker: Locker<Box<dyn LockBackend>>,
        schedule: Schedule,
        on_renewed: OnRenewed,
    ) -> Option<Keeper> {
        let (stop, stopped) = mpsc::channel();
        let (begin, releasing) = mpsc::channel();
        let (done, released) = mpsc::channel();
        let ttl = schedule.ttl;
        let started = thread::Builder::new()
            .name("syncguard-keep".to_owned())
            .spawn(move || {
                renew_until_stopped(&guard, &schedule, &on_renewed, &stopped);
                let _ = begin.send(());
                let _ = done.send(release(guard, locker));
            });
        match started {
            Ok(_) => Some(Keeper {
                stop,
                releasing,
                released,
                ttl,
            }),
            Err(error) => {
                eprintln!("syncguard: could not start renewing the lease: {error}");
                None
            }
        }
    }

    /// Stops renewing and releases the lease, waiting at most `limit` for the release before
    /// `run` exits anyway. A renewal still in flight comes back first (the library sends
    /// nothing for a lease after its release began): that wait is bounded by the backend's
    /// own timeouts, and here by the TTL, past which the renewal could not matter.
    pub fn release_within(self, limit: Duration) {
        let _ = self.stop.send(());
        if self.releasing.recv_timeout(self.ttl).is_err() {
            eprintln!(
                "syncguard: a renewal of the lease did not come back within {}; exiting without \
                 the release (the lock expires at its ttl)",
                humantime::format_duration(self.ttl)
            );
            return;
        }
        report(self.released.recv_timeout(limit), limit);
    }
}

/// Renews the lease every `interval` after the last confirmed renewal was sent, and sooner
/// after a failure, until told to stop; after a loss (which the library reports) only waits.
fn renew_until_stopped(
    guard: &LockGuard,
    schedule: &Schedule,
    on_renewed: &OnRenewed,
    stopped: &mpsc::Receiver<()>,
) {
    let retry_gap = (schedule.interval / 4).clamp(MIN_RETRY_GAP, MAX_RETRY_GAP);
    let mut next = schedule.confirmed + schedule.interval;
    let mut failing = false;
    loop {
        match stopped.recv_timeout(next.saturating_duration_since(Instant::now())) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
        }
        // Taken before the request goes out: the local deadline is never later than the one
        // the store keeps.
        let sent = Instant::now();
        match guard.extend(schedule.ttl) {
            Ok(true) => {
                if failing {
                    eprintln!("syncguard: renewing the lease works again");
                }
                failing = false;
                on_renewed(sent + schedule.ttl);
                next = sent + schedule.interval;
            }
            Ok(false) => {
                // Lost: the library has told the supervisor (`on_lock_lost`). Nothing to renew.
                let _ = stopped.recv();
                return;
            }
            Err(error) => {
                if !failing && !guard.is_lost() {
                    eprintln!(
                        "syncguard: renewing the lease failed (retrying while it lasts): {error}"
                    );
                }
                failing = true;
                next = Instant::now() + retry_gap;
            }
        }
    }
}

/// Releases the lease, whatever became of it: one the store confirmed lost costs nothing (the
/// library knows there is nothing to release), and one that ran out here unconfirmed may have
/// been kept alive in the store by a renewal whose answer never came back (applied late, e.g.
/// behind a PgBouncer `PAUSE`): releasing it frees the key now instead of a TTL later.
fn release(guard: LockGuard, locker: Locker<Box<dyn LockBackend>>) -> Released {
    let released = guard.release();
    // The backend's connections close here too, within the same limit.
    drop(locker);
    released
}

/// Releases the lease on a thread of its own and waits for it at most `limit`: if the backend
/// does not answer by then, `run` says so and exits anyway, and the lease runs out at its TTL.
pub fn release_within(guard: LockGuard, locker: Locker<Box<dyn LockBackend>>, limit: Duration) {
    let (done, outcome) = mpsc::channel();
    let releasing = thread::Builder::new()
        .name("syncguard-release".to_owned())
        .spawn(move || {
            let _ = done.send(release(guard, locker));
        });
    if releasing.is_err() {
        eprintln!("syncguard: could not start the release; the lock expires at its ttl");
        return;
    }
    report(outcome.recv_timeout(limit), limit);
}

/// Says on stderr what went wrong with the release, if anything.
fn report(outcome: Result<Released, mpsc::RecvTimeoutError>, limit: Duration) {
    match outcome {
        Ok(Ok(_)) => {}
        Ok(Err(error)) => {
            eprintln!("syncguard: releasing the lock failed (it expires at its ttl): {error}");
        }
        Err(_) => eprintln!(
            "syncguard: releasing the lock did not finish within {}; exiting anyway (it expires at its ttl)",
            humantime::format_duration(limit)
        ),
    }
}
