//! What `run` and `acquire` hold once they took it: one key's guard (the lock, a shared hold or
//! a permit) or several keys', held alike as a [`MultiLockGuard`] (one key is a set of one), so
//! that the supervision, the loss, `--min-hold` and the release are written once.
//!
//! A set is lost as a whole: its deadline is its earliest lease's, and it is lost when any lease
//! is (`run` then ends the command exactly as for one key).

use syncguard::{LockGuard, MultiLockGuard};

/// What is held.
pub type Held = MultiLockGuard;

/// The command's environment: `SYNCGUARD_FENCE`, `SYNCGUARD_LOCK_ID` and `SYNCGUARD_KEY`,
/// each one value per key, one per line in key order (no newline after the last): for one
/// key, its value alone.
pub fn environment(held: &Held) -> [(&'static str, String); 3] {
    let lines = |each: fn(&LockGuard) -> String| {
        let values: Vec<String> = held.guards().iter().map(each).collect();
        values.join("\n")
    };
    [
        ("SYNCGUARD_FENCE", lines(|guard| guard.fence().to_string())),
        (
            "SYNCGUARD_LOCK_ID",
            lines(|guard| guard.lock_id().to_owned()),
        ),
        ("SYNCGUARD_KEY", lines(|guard| guard.key().to_owned())),
    ]
}
