//! `syncguard break`: an operator's forced release of a key's live holders, whatever their
//! lock ids ([`Locker::break_key`]): the lock, its shared holders, or its semaphore's permits
//! (all, or one by lock id), with a reason and a delay during which a marker keeps the key
//! from anyone.

use serde_json::{Value, json};
use syncguard::driver::{Broken, Ttl};
use syncguard::{BreakOptions, LockBackend, LockInfoDebug, Locker};

use crate::args::BreakArgs;
use crate::holder;
use crate::input;
use crate::outcome::Outcome;

/// The library's options: the operator is this process (`HOST:PID syncguard`).
fn options(args: &BreakArgs) -> BreakOptions {
    let mut options = BreakOptions::new();
    if args.shared {
        options = options.shared();
    }
    if args.permits.is_some() {
        options = options.permits();
    }
    if let Some(lock_id) = &args.lock_id {
        options = options.lock_id(lock_id);
    }
    if let Some(reason) = &args.reason {
        options = options.reason(reason);
    }
    if let Some(delay) = args.delay {
        options = options.delay(delay);
    }
    if let Some(by) = holder::of_break() {
        options = options.by(by.into_string());
    }
    options
}

/// Everything checked before any backend is reached, each check naming its option.
fn checked(args: &BreakArgs) -> syncguard::Result<BreakOptions> {
    input::key(&args.key)?;
    args.lock_id.as_deref().map(input::lock_id).transpose()?;
    if let Some(delay) = args.delay.filter(|delay| !delay.is_zero()) {
        Ttl::new(delay).map_err(|error| input::named("--delay", &error))?;
    }
    let options = options(args);
    // What is left to check is the note: who breaks it (this process) and --reason.
    options
        .validate()
        .map_err(|error| input::named("--reason", &error))?;
    Ok(options)
}

/// `break`: the arguments checked first, then the key broken; exit 1 when nothing live was
/// held.
pub fn break_key(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    args: &BreakArgs,
) -> syncguard::Result<Outcome> {
    let options = checked(args)?;
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
