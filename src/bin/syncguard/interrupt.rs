//! The signals that end a command that follows a key (`watch`, `leader --watch`) with exit 0:
//! an interrupted follower has done its job.

use std::thread;

use syncguard::{CancelToken, LockError};

/// SIGTERM and SIGINT.
const STOP_SIGNALS: [libc::c_int; 2] = [libc::SIGTERM, libc::SIGINT];

/// A token cancelled at the first SIGTERM or SIGINT (caught from now on).
pub fn cancelled_on_stop_signals() -> syncguard::Result<CancelToken> {
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
    Ok(cancel)
}
