//! Connecting to the backend within `--wait`: a store that refuses connections or does not
//! answer (restarting, failing over) is a transient error like any other, waited through as
//! the acquisition waits through one, while what trying again cannot mend — a bad URL, refused
//! credentials, a missing database — fails at once.
//!
//! The backends connect eagerly (Redis and PostgreSQL open a connection to check the URL and
//! the credentials), so without this a `--wait` meant nothing while the store was down: the
//! first refused connection ended the command.

use std::thread;
use std::time::{Duration, Instant};

use syncguard::CancelToken;

use crate::waiting::RETRY_DELAY;

/// Calls `connect` until it succeeds, fails with an error that is not transient, `wait` has
/// passed (its last error is returned), or `cancel` is cancelled. With no `wait`, one try.
pub fn within<B>(
    connect: impl Fn() -> syncguard::Result<B>,
    wait: Duration,
    cancel: &CancelToken,
) -> syncguard::Result<B> {
    let started = Instant::now();
    loop {
        match connect() {
            Err(error) if error.code().is_transient() && !cancel.is_cancelled() => {
                let left = wait.saturating_sub(started.elapsed());
                if left.is_zero() {
                    return Err(error);
                }
                log::debug!("connecting failed, trying again within --wait: {error}");
                thread::sleep(RETRY_DELAY.min(left));
            }
            connected => return connected,
        }
    }
}
