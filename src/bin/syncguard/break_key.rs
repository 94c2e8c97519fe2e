//! `syncguard break`: an operator's forced release of a key's live holders, whatever their
//! lock ids ([`Locker::break_key`]): the lock, its shared holders, or its semaphore's permits
//! (all, or one by lock id), with a reason and a delay during which a marker keeps the key
//! from anyone.

use std::time::Duration;

use serde_json::{Value, json};
use syncguard::driver::{Broken, Ttl};
use syncguard::{BreakOptions, LockBackend, LockInfoDebug, Locker};

use crate::args::parse_permits;
use crate::duration::parse_duration;
use crate::holder;
use crate::input;
use crate::outcome::Outcome;

/// `break`'s arguments.
#[derive(clap::Args)]
pub struct BreakArgs {
    /// The key whose holders are broken.
    #[arg(long, allow_hyphen_values = true)]
    key: String,
    /// Break the key's shared holders (acquire/run --shared) instead of its lock.
    #[arg(short = 's', long, conflicts_with = "permits")]
    shared: bool,
    /// Break the permits of the key's semaphore (acquire/run --permits N) instead of its lock:
    /// all of them, or the one --lock-id names. N is checked as acquire checks it (1 to 1000)
    /// and otherwise not used: every permit of the key is a candidate.
    #[arg(long, value_name = "N", value_parser = parse_permits)]
    permits: Option<u32>,
    /// Break only the holder granted under this lock id (a permit, a shared holder, or the
    /// lock while that lease still holds it).
    #[arg(long, value_name = "ID", allow_hyphen_values = true)]
    lock_id: Option<String>,
    /// Why: stored with the marker and shown by `status` while the delay lasts.
    #[arg(long, value_name = "TEXT", allow_hyphen_values = true)]
    reason: Option<String>,
    /// How long each broken holder's place stays taken after the break, so that the broken
    /// holder (which learns at its next renewal: run --on-lost kill ends its command) stops
    /// before anyone else starts. 0: free at once. [default: the rest of the broken lease]
    #[arg(long, value_name = "D", value_parser = parse_duration)]
    delay: Option<Duration>,
}

impl BreakArgs {
    /// The library's options: the operator is this process (`HOST:PID syncguard`).
    fn options(&self) -> BreakOptions {
        let mut options = BreakOptions::new();
        if self.shared {
            options = options.shared();
        }
        if self.permits.is_some() {
            options = options.permits();
        }
        if let Some(lock_id) = &self.lock_id {
            options = options.lock_id(lock_id);
        }
        if let Some(reason) = &self.reason {
            options = options.reason(reason);
        }
        if let Some(delay) = self.delay {
            options = options.delay(delay);
        }
        if let Some(by) = holder::of_break() {
            options = options.by(by.into_string());
        }
        options
    }

    /// Everything checked before any backend is reached, each check naming its option.
    fn checked(&self) -> syncguard::Result<BreakOptions> {
        input::key(&self.key)?;
        self.lock_id.as_deref().map(input::lock_id).transpose()?;
        if let Some(delay) = self.delay.filter(|delay| !delay.is_zero()) {
            Ttl::new(delay).map_err(|error| input::named("--delay", &error))?;
        }
        let options = self.options();
        // What is left to check is the note: who breaks it (this process) and --reason.
        options
            .validate()
            .map_err(|error| input::named("--reason", &error))?;
        Ok(options)
    }
}

/// `break`: the arguments checked first, then the key broken; exit 1 when nothing live was
/// held.
pub fn break_key(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    args: &BreakArgs,
) -> syncguard::Result<Outcome> {
    let options = args.checked()?;
    let locker = Locker::new(connect()?);
    Ok(shown(&locker.break_key(&args.key, &options)?))
}

/// What `break` prints: the broken holders as `status` shows a lock (hashes only), and the
/// markers' fences and ends; or that nothing was held (exit 1).
fn shown(broken: &Broken) -> Outcome {
    if broken.holders.is_empty() {
        return Outcome::Printed(json!({ "ok": false, "reason": "nothing held" }), 1);
    }
    let holders: Vec<Value> = (broken.holders.iter())
        .map(|record| json!(LockInfoDebug::from(record.clone()).info))
        .collect();
    let markers: Vec<Value> = (broken.markers.iter())
        .map(|marker| json!({ "fence": marker.fence, "untilMs": marker.expires_at_ms }))
        .collect();
    Outcome::Printed(
        json!({ "ok": true, "broken": holders, "markers": markers }),
        0,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncguard::Fence;
    use syncguard::driver::{LockRecord, marker_lock_id};

    fn record(lock_id: String, fence: u64, holder: &str) -> LockRecord {
        LockRecord {
            key: "k".to_owned(),
            lock_id,
            expires_at_ms: 9_000,
            acquired_at_ms: 1_000,
            fence: Fence::from_counter(fence).unwrap(),
            holder: Some(holder.to_owned()),
        }
    }

    #[test]
    fn the_broken_are_shown_hashed_and_the_markers_by_fence_and_end() {
        let held = record("A".repeat(22), 7, "web-1:42 job");
        let marker = record(marker_lock_id().into_string(), 8, "broken by ops");
        let Outcome::Printed(value, 0) = shown(&Broken {
            holders: vec![held.clone()],
            markers: vec![marker],
        }) else {
            panic!("exit 0 when something was broken");
        };
        assert_eq!(value["ok"], json!(true));
        assert_eq!(value["broken"][0]["fence"], json!("000000000000007"));
        assert_eq!(value["broken"][0]["holder"], json!("web-1:42 job"));
        assert_eq!(
            value["broken"][0]["lockIdHash"],
            json!(syncguard::driver::hash_key(&held.lock_id))
        );
        assert!(!value.to_string().contains(&held.lock_id));
        assert_eq!(
            value["markers"],
            json!([{ "fence": "000000000000008", "untilMs": 9_000 }])
        );
        let Outcome::Printed(value, 1) = shown(&Broken::default()) else {
            panic!("exit 1 when nothing was held");
        };
        assert_eq!(value, json!({ "ok": false, "reason": "nothing held" }));
    }
}
