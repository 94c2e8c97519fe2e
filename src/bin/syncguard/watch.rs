//! `syncguard watch`: follows a key's state without holding it, one JSON line per state
//! ([`syncguard::KeyState`]), until SIGTERM or SIGINT (exit 0), or with `--until-free` until
//! the first free state (exit 0).

use std::io;
use std::thread;

use syncguard::{CancelToken, KeyState, LeaseKind, LockBackend, LockError, Locker};

use crate::input;
use crate::outcome::Outcome;

/// The signals that end a watch, with exit 0: an interrupted watch has done its job.
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// What `watch` was asked to follow.
pub struct WatchArgs {
    pub key: String,
    pub kind: LeaseKind,
    /// `--until-free`: end at the first free state.
    pub until_free: bool,
}

/// `watch`: `--key` checked first, the signals caught, then the states printed as they come.
pub fn watch(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    args: &WatchArgs,
) -> syncguard::Result<Outcome> {
    input::key(&args.key)?;
    let cancel = CancelToken::new();
    let mut signals = signal_hook::iterator::Signals::new(STOP_SIGNALS)
        .map_err(|e| LockError::internal(format!("could not install signal handlers: {e}")))?;
    thread::Builder::new()
        .name("syncguard-signals".to_owned())
        .spawn({
            let cancel = cancel.clone();
            move || {
                if signals.forever().next().is_some() {
                    cancel.cancel();
                }
            }
        })
        .map_err(|e| LockError::internal(format!("could not start the signal thread: {e}")))?;
    let locker = Locker::new(connect()?);
    let states = locker.watch_as(&args.key, args.kind)?.with_cancel(cancel);
    let mut stdout = io::stdout().lock();
    for state in states {
        let state = state?;
        if !printed(&mut stdout, &state) {
            // Whoever read the states is gone (a closed pipe): nothing is left to do.
            break;
        }
        if args.until_free && state.is_free() {
            break;
        }
    }
    Ok(Outcome::Exit(0))
}

/// Prints `state` as one JSON line and flushes it, for a reader that acts on each line as it
/// comes; `false` when stdout is closed.
fn printed(stdout: &mut impl io::Write, state: &KeyState) -> bool {
    let line = serde_json::to_string(state).unwrap_or_else(|error| {
        // A state is plain data: it always serialises; say so rather than print nothing.
        serde_json::json!({ "state": "unprintable", "error": error.to_string() }).to_string()
    });
    writeln!(stdout, "{line}")
        .and_then(|()| stdout.flush())
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_state_is_one_flushed_line() {
        let mut out = Vec::new();
        assert!(printed(&mut out, &KeyState::Released));
        assert!(printed(&mut out, &KeyState::Free));
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "{\"state\":\"released\"}\n{\"state\":\"free\"}\n"
        );
    }
}
