//! How `run` gives the lock back at the end: on a thread of its own, within a limit (a
//! backend that does not answer must not hold up the exit), with `--min-hold` kept for a
//! command that ran, and a note on stderr on what became of it.

use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use syncguard::driver::TIME_TOLERANCE_MS;
use syncguard::{LockBackend, Locker};

use crate::held::Held;

/// Whether the command ran: `--min-hold` holds the lock for a job that ran, not for one that
/// never started.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Ending {
    /// The command ran: a `--min-hold` keeps the lock until it ends.
    Ran,
    /// It never started (a signal while acquiring, the lease lost before the start, a command
    /// that could not be executed): the lock is released at once.
    NeverStarted,
}

/// What the release at the end came to, and what the lease looked like just before it.
struct Released {
    outcome: syncguard::Result<bool>,
    /// When `--min-hold` ends (store time), if it was kept.
    hold_until_ms: Option<i64>,
    /// The last expiry the store confirmed.
    expires_at_ms: i64,
}

/// Releases the lease, whatever became of it: one the store confirmed lost costs nothing (the
/// library knows there is nothing to release), and one that ran out here unconfirmed may have
/// been kept alive in the store by a renewal whose answer never came back (applied late, e.g.
/// behind a PgBouncer `PAUSE`): releasing it frees the key now instead of a TTL later.
fn release(guard: Held, locker: Locker<Box<dyn LockBackend>>, ending: Ending) -> Released {
    let hold_until_ms = guard.min_hold_until_ms().filter(|_| ending == Ending::Ran);
    let expires_at_ms = guard.expires_at_ms();
    let outcome = match ending {
        Ending::Ran => guard.release(),
        Ending::NeverStarted => guard.release_without_hold(),
    };
    // The backend's connections close here too, within the same limit.
    drop(locker);
    Released {
        outcome,
        hold_until_ms,
        expires_at_ms,
    }
}

/// How `run` releases the lock at the end, however the run ended.
#[derive(Clone, Copy)]
pub struct Releasing {
    /// How long the release may take before `run` exits anyway.
    pub limit: Duration,
    /// `-q`: no note when all went well.
    pub quiet: bool,
}

impl Releasing {
    /// Releases the lease on a thread of its own and waits for it at most `limit`: if the
    /// backend does not answer by then, `run` says so and exits anyway, and the lease runs out
    /// at its TTL (with `--min-hold`, at the hold's end at the earliest).
    pub fn release(self, guard: Held, locker: Locker<Box<dyn LockBackend>>, ending: Ending) {
        let Releasing { limit, quiet } = self;
        let (done, outcome) = mpsc::channel();
        let releasing = thread::Builder::new()
            .name("syncguard-release".to_owned())
            .spawn(move || {
                let _ = done.send(release(guard, locker, ending));
            });
        if releasing.is_err() {
            eprintln!("syncguard: could not start the release; the lock expires at its ttl");
            return;
        }
        match outcome.recv_timeout(limit) {
            Ok(released) => report(&released, quiet),
            Err(_) => eprintln!(
                "syncguard: releasing the lock did not finish within {}; exiting anyway (it \
                 expires at its ttl{})",
                humantime::format_duration(limit),
                if ending == Ending::Ran {
                    ", or when --min-hold ends if later"
                } else {
                    ""
                }
            ),
        }
    }
}

/// Says on stderr what became of the lock: with `--min-hold`, whether the hold is set and until
/// when (unless `quiet`: a hold set as asked is the one outcome cron need not mail about);
/// otherwise only what went wrong, if anything.
fn report(released: &Released, quiet: bool) {
    let Some(hold_until_ms) = released.hold_until_ms else {
        if let Err(error) = &released.outcome {
            eprintln!("syncguard: releasing the lock failed (it expires at its ttl): {error}");
        }
        return;
    };
    let expires = released.expires_at_ms;
    match &released.outcome {
        Ok(true) if quiet => {}
        Ok(true) => eprintln!(
            "syncguard: --min-hold: hold set until {}",
            timestamp(hold_until_ms)
        ),
        Ok(false) => eprintln!(
            "syncguard: --min-hold: hold not set: the lock was gone already (lost or taken over)"
        ),
        // The acquisition and every renewal asked the store for the hold at least, so the
        // record lasts until then whether or not this last call got through (the store's own
        // tolerance covers the few ms by which the renewals' clocks and the acquisition's
        // differ).
        Err(error) if expires.saturating_add(TIME_TOLERANCE_MS) >= hold_until_ms => eprintln!(
            "syncguard: --min-hold: hold set until {} (setting the lock to end then failed: \
             {error}; it expires at {})",
            timestamp(hold_until_ms),
            timestamp(expires)
        ),
        Err(error) => eprintln!(
            "syncguard: --min-hold: hold not set: lease expires at {}: {error}",
            timestamp(expires)
        ),
    }
}

/// `ms` (Unix ms) as an RFC 3339 UTC timestamp.
fn timestamp(ms: i64) -> String {
    let at = std::time::UNIX_EPOCH + Duration::from_millis(ms.max(0).unsigned_abs());
    humantime::format_rfc3339_millis(at).to_string()
}
