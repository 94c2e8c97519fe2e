//! `syncguard leader`: who leads an election (the holder of the lock on its name), once, or
//! followed as it changes (`--watch`, like `etcdctl elect --listen`).
//!
//! `--watch` reads the leader again at every release the store announces for the name
//! (Redis pub/sub, PostgreSQL NOTIFY) and at least every [`POLL`]: a lease that expires, a new
//! election and a store that announces nothing (PgBouncer, Firestore) are seen within it.

use std::io::Write as _;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use syncguard::driver::{Driver, Key};
use syncguard::{Leader, LockBackend, LockError, Locker};

use crate::input;
use crate::outcome::Outcome;

/// How long `--watch` goes at most without reading the leader again.
const POLL: Duration = Duration::from_millis(500);

/// The signals that end `--watch` (with exit 0).
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// `leader`: `--key` checked first, then the leader read (and with `watch`, followed).
pub fn leader(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    key: &str,
    watch: bool,
) -> syncguard::Result<Outcome> {
    input::key(key)?;
    let locker = Locker::new(connect()?);
    if watch {
        return follow(&locker, key);
    }
    let leader = locker.leader(key)?;
    Ok(Outcome::Printed(
        shown(leader.as_ref()),
        u8::from(leader.is_none()),
    ))
}

/// What `leader` prints: `{"value","term","sinceMs","expiresAtMs"}`, or `null` for nobody.
fn shown(leader: Option<&Leader>) -> Value {
    leader.map_or(Value::Null, |leader| {
        json!({
            "value": leader.value,
            "term": leader.term,
            "sinceMs": leader.since_ms,
            "expiresAtMs": leader.expires_at_ms,
        })
    })
}

/// What wakes `--watch`.
enum Wake {
    /// A release of the name was announced.
    Released,
    /// SIGTERM or SIGINT.
    Stop,
}

/// `--watch`: a line with the leader now, then one each time it changes (another leader, a new
/// term, a proclaimed value, or nobody), until SIGTERM or SIGINT (exit 0). A renewal, which
/// changes only the expiry, prints nothing.
fn follow<B: Driver + 'static>(locker: &Locker<B>, key: &str) -> syncguard::Result<Outcome> {
    let (wakes, woken) = mpsc::channel();
    stop_on_signals(wakes.clone())?;
    let name = Key::new(key)?;
    let announced = {
        let (wakes, name) = (wakes.clone(), name.as_str().to_owned());
        Arc::new(move |released: &str| {
            if released == name {
                let _ = wakes.send(Wake::Released);
            }
        })
    };
    // Kept until the end: dropping it stops hearing of releases.
    let releases = locker.backend().watch_releases(announced)?;
    if let Some(releases) = &releases {
        releases.watch(&name);
    }
    let mut last: Option<Option<(Option<String>, syncguard::Fence)>> = None;
    loop {
        match locker.leader(key) {
            Ok(leader) => {
                let now = leader.as_ref().map(|l| (l.value.clone(), l.term));
                if last.as_ref() != Some(&now) {
                    let mut stdout = std::io::stdout().lock();
                    let _ = writeln!(stdout, "{}", shown(leader.as_ref()));
                    let _ = stdout.flush();
                    last = Some(now);
                }
            }
            // A store down for a while: the leader is read again at the next wake.
            Err(error) if error.code().is_transient() => {
                log::warn!("syncguard: reading the leader failed, will retry: {error}");
            }
            Err(error) => return Err(error),
        }
        match woken.recv_timeout(POLL) {
            Ok(Wake::Stop) => break,
            Ok(Wake::Released) | Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    if let Some(releases) = &releases {
        releases.unwatch(&name);
    }
    Ok(Outcome::Exit(0))
}

/// Sends [`Wake::Stop`] to `wakes` at the first SIGTERM or SIGINT.
fn stop_on_signals(wakes: Sender<Wake>) -> syncguard::Result<()> {
    let mut signals = signal_hook::iterator::Signals::new(STOP_SIGNALS)
        .map_err(|e| LockError::internal(format!("could not install signal handlers: {e}")))?;
    thread::Builder::new()
        .name("syncguard-signals".to_owned())
        .spawn(move || {
            if signals.forever().next().is_some() {
                let _ = wakes.send(Wake::Stop);
            }
        })
        .map_err(|e| LockError::internal(format!("could not start the signal thread: {e}")))?;
    Ok(())
}
