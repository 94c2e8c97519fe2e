//! The pace of a wait for the lock (`--wait`), and for a store that is down.

use std::time::Duration;

use syncguard::{Backoff, Jitter, LockOptions};

/// The pace of a wait: between acquisition attempts (jittered), and between attempts to
/// connect to a store that is down.
pub const RETRY_DELAY: Duration = Duration::from_millis(250);

/// Long `--wait`s poll at a steady pace: exponential backoff would leave minutes between
/// attempts, taking the lock long after it was freed.
pub fn waiting(options: LockOptions) -> LockOptions {
    options
        .backoff(Backoff::Fixed)
        .jitter(Jitter::Equal)
        .retry_delay(RETRY_DELAY)
}
