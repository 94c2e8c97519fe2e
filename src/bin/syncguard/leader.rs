//! `syncguard leader`: who leads an election (the holder of the lock on its name), once, or
//! followed as it changes (`--watch`, like `etcdctl elect --listen`).
//!
//! `--watch` is [`Locker::observe`]: what a watch of the name's lock hears, when it hears it
//! (`syncguard watch`).

use std::io;

use serde_json::{Value, json};
use syncguard::driver::Driver;
use syncguard::{Leader, LockBackend, Locker};

use crate::input;
use crate::interrupt::cancelled_on_stop_signals;
use crate::outcome::Outcome;
use crate::watch::print_line;

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

/// `--watch`: a line with the leader now, then one each time it changes (another leader, a new
/// term, a proclaimed value, or nobody), until SIGTERM or SIGINT (exit 0) or a closed stdout.
fn follow<B: Driver + 'static>(locker: &Locker<B>, key: &str) -> syncguard::Result<Outcome> {
    let cancel = cancelled_on_stop_signals()?;
    let mut stdout = io::stdout().lock();
    for leader in locker.observe(key)?.with_cancel(cancel) {
        if !print_line(&mut stdout, &shown(leader?.as_ref())) {
            break;
        }
    }
    Ok(Outcome::Exit(0))
}
