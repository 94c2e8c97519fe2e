//! What `run` and `acquire` hold once they took it: one key's [`LockGuard`] (the lock, a shared
//! hold or a permit) or several keys' [`MultiLockGuard`]. The one place that tells them apart,
//! so that the supervision, the loss, `--min-hold` and the release are written once.
//!
//! A set is lost as a whole: its deadline is its earliest lease's, and it is lost when any lease
//! is (`run` then ends the command exactly as for one key).

use std::time::Instant;

use syncguard::driver::Lease;
use syncguard::{LockGuard, MultiLockGuard};

/// A held lease, or several held together.
#[derive(Debug)]
pub enum Held {
    /// One key.
    One(LockGuard),
    /// Several keys, all or none.
    Set(MultiLockGuard),
}

impl Held {
    /// Each key's guard, in key order.
    fn guards(&self) -> &[LockGuard] {
        match self {
            Held::One(guard) => std::slice::from_ref(guard),
            Held::Set(set) => set.guards(),
        }
    }

    /// The local deadline: the earliest of the leases'.
    pub fn deadline(&self) -> Instant {
        match self {
            Held::One(guard) => guard.deadline(),
            Held::Set(set) => set.deadline(),
        }
    }

    /// Whether any lease is lost.
    pub fn is_lost(&self) -> bool {
        match self {
            Held::One(guard) => guard.is_lost(),
            Held::Set(set) => set.is_lost(),
        }
    }

    /// When `--min-hold` ends (store time), for the earliest lease: the hold every key has.
    pub fn min_hold_until_ms(&self) -> Option<i64> {
        self.guards()
            .iter()
            .map(LockGuard::min_hold_until_ms)
            .min()
            .flatten()
    }

    /// The earliest expiry the store confirmed among the leases.
    pub fn expires_at_ms(&self) -> i64 {
        self.guards()
            .iter()
            .map(LockGuard::expires_at_ms)
            .min()
            .unwrap_or_default()
    }

    /// Releases every lease (keeping `--min-hold`): `Ok(true)` if each was still held.
    pub fn release(self) -> syncguard::Result<bool> {
        match self {
            Held::One(guard) => guard.release(),
            Held::Set(set) => set.release(),
        }
    }

    /// Releases every lease at once, `--min-hold` or not.
    pub fn release_without_hold(self) -> syncguard::Result<bool> {
        match self {
            Held::One(guard) => guard.release_without_hold(),
            Held::Set(set) => set.release_without_hold(),
        }
    }

    /// Gives the leases up to outlive this process (`acquire`), in key order.
    pub fn detach(self) -> Vec<Lease> {
        match self {
            Held::One(guard) => vec![guard.detach()],
            Held::Set(set) => set.detach(),
        }
    }

    /// The command's environment: `SYNCGUARD_FENCE`, `SYNCGUARD_LOCK_ID` and `SYNCGUARD_KEY`,
    /// each one value per key, one per line in key order (no newline after the last): for one
    /// key, its value alone.
    pub fn environment(&self) -> [(&'static str, String); 3] {
        let lines = |each: fn(&LockGuard) -> String| {
            let values: Vec<String> = self.guards().iter().map(each).collect();
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
}
