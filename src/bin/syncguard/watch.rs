//! `syncguard watch`: follows a key's state without holding it, one JSON line per state
//! ([`syncguard::KeyState`]), until SIGTERM or SIGINT (exit 0), or with `--until-free` until
//! the first free state (exit 0).

use std::io;

use syncguard::{KeyState, LeaseKind, LockBackend, Locker};

use crate::input;
use crate::interrupt::cancelled_on_stop_signals;
use crate::outcome::Outcome;

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
    let cancel = cancelled_on_stop_signals()?;
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
    let line = serde_json::to_value(state).unwrap_or_else(|error| {
        // A state is plain data: it always serialises; say so rather than print nothing.
        serde_json::json!({ "state": "unprintable", "error": error.to_string() })
    });
    print_line(stdout, &line)
}

/// Prints `line` as one line of JSON and flushes it, for a reader that acts on each line as it
/// comes; `false` when stdout is closed.
pub fn print_line(stdout: &mut impl io::Write, line: &serde_json::Value) -> bool {
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
