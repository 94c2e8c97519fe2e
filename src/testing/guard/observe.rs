//! Guard contracts for lifecycle hooks: what observers attached to a `Locker` are told.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::thread;
use std::time::Duration;

use crate::observe::{Kind, Refusal, Release};
use crate::testing::observed::{EventLog, Panicking, Seen};
use crate::testing::recorder::recorded_locker;
use crate::testing::support::{PATIENCE, short_lease, unique_key, wait_until};
use crate::{Jitter, LockBackend};

/// Several guards on one `Locker`, with an observer that panics attached before the one that
/// keeps the events: every acquisition and lease is reported as it went. A lease removed from
/// outside is lost exactly once, at a renewal; the others keep being renewed; a `try_lock` of a
/// held key is refused as held, a `try_lock_for` as timed out; a waiter woken by a release
/// reports its wait and attempts; releases say whether they released, kept a `min_hold`, or
/// found the lease gone; failed renewals and a hand-over are reported too. The panicking
/// observer changes none of it.
pub fn observers_see_what_each_lease_lived_through<B: LockBackend + 'static>(backend: B) {
    let [removed, waited_on, kept] = ["obs-removed", "obs-waited", "obs-kept"].map(unique_key);
    let log = Arc::new(EventLog::default());
    let (locker, recorder) = recorded_locker(backend, short_lease(5_000, 500));
    let locker = locker
        .with_observer(Arc::new(Panicking))
        .with_observer(log.clone());
    let gone = locker.lock(&removed).unwrap();
    let held = locker.lock(&waited_on).unwrap();
    let hold = short_lease(5_000, 500).min_hold(Duration::from_secs(10));
    let kept_guard = locker.lock_with(&kept, &hold).unwrap();
    for key in [&removed, &waited_on, &kept] {
        let first = log.of(key).first().cloned();
        assert!(
            matches!(
                first,
                Some(Seen::Acquired {
                    kind: Kind::Lock,
                    attempts: 1,
                    ..
                })
            ),
            "{key}: {first:?}"
        );
    }
    let renewed = |key: &str| log.count(key, |seen| *seen == Seen::Renewed);
    wait_until("a renewal of each lease", PATIENCE, || {
        renewed(&removed) >= 1 && renewed(&waited_on) >= 1
    });

    // Removed from outside: lost at its next renewal, once; the neighbours go on.
    assert!(locker.backend().release(gone.lock_id()).unwrap());
    let lost = |key: &str| log.count(key, |seen| matches!(seen, Seen::Lost { .. }));
    wait_until("the removed lease reported lost", PATIENCE, || {
        lost(&removed) >= 1
    });
    assert!(gone.is_lost());
    let renewals_of_the_other = renewed(&waited_on);
    wait_until("the other lease renewed again", PATIENCE, || {
        renewed(&waited_on) > renewals_of_the_other
    });
    assert_eq!(
        log.count(&removed, |seen| *seen == Seen::Lost { by_renewal: true }),
        1,
        "{:?}",
        log.of(&removed)
    );
    assert_eq!(lost(&waited_on), 0);
    assert_eq!(lost(&kept), 0);

    // Refusals: one attempt finds it held; a bounded wait times out.
    assert!(locker.try_lock(&waited_on).unwrap().is_none());
    let short = Duration::from_millis(300);
    assert!(locker.try_lock_for(&waited_on, short).unwrap().is_none());
    let refusals: Vec<Refusal> = log
        .of(&waited_on)
        .into_iter()
        .filter_map(|seen| match seen {
            Seen::NotAcquired { why, .. } => Some(why),
            _ => None,
        })
        .collect();
    assert_eq!(refusals, [Refusal::Held, Refusal::Timeout]);

    // A waiter woken by a release: its wait and attempts are recorded.
    // Awaited by its answer, not by its start: a release while the first attempt is still on
    // its way would let that attempt take the key (seen through PgBouncer on a loaded machine).
    let found_held = || recorder.found_held(&waited_on);
    let before = found_held();
    let patient = short_lease(5_000, 500)
        .retry_delay(Duration::from_secs(30))
        .max_retry_delay(Duration::from_secs(30))
        .jitter(Jitter::None);
    let waiter = thread::spawn({
        let (locker, key) = (locker.clone(), waited_on.clone());
        move || {
            locker
                .lock_with(&key, &patient)
                .map(|guard| guard.release())
        }
    });
    wait_until(
        "the waiter's first attempt to find it held",
        PATIENCE,
        || found_held() > before,
    );
    assert!(held.release().unwrap());
    assert!(waiter.join().unwrap().unwrap().unwrap());
    let acquisitions: Vec<Seen> = log
        .of(&waited_on)
        .into_iter()
        .filter(|seen| matches!(seen, Seen::Acquired { .. }))
        .collect();
    match acquisitions.as_slice() {
        [_, Seen::Acquired { wait, attempts, .. }] => {
            assert!(*attempts >= 2, "the waiter found it held first: {attempts}");
            assert!(!wait.is_zero());
        }
        other => panic!("two acquisitions of {waited_on}: {other:?}"),
    }

    // Releases, each once, with what they came to.
    assert!(kept_guard.release().unwrap());
    assert!(!gone.release().unwrap());
    let released = |key: &str| -> Vec<(Release, bool)> {
        log.of(key)
            .into_iter()
            .filter_map(|seen| match seen {
                Seen::Released {
                    how, after_loss, ..
                } => Some((how, after_loss)),
                _ => None,
            })
            .collect()
    };
    assert_eq!(
        released(&waited_on),
        [(Release::Released, false), (Release::Released, false)]
    );
    assert_eq!(released(&kept), [(Release::KeptForMinHold, false)]);
    assert_eq!(released(&removed), [(Release::AlreadyGone, true)]);
    // Nothing is said about a lease after its release.
    let settled = log.all().len();
    assert!(locker.try_lock(&removed).unwrap().is_some());
    assert_eq!(log.all().len(), settled + 2, "{:?}", &log.all()[settled..]);

    // A key that looks like it embeds a credential is never handed out raw.
    let secret = unique_key("obs-token");
    drop(locker.lock(&secret).unwrap());
    assert!(log.of(&secret).is_empty());
    assert_eq!(log.all().len(), settled + 4);
    assert!(
        log.all()[settled + 2..]
            .iter()
            .all(|(key, _)| key.is_none())
    );

    // Failed renewals are reported, and the lease goes on; a hand-over ends it here.
    let blip = unique_key("obs-blip");
    let guard = locker.lock(&blip).unwrap();
    recorder.failing_extends.store(2, Ordering::SeqCst);
    wait_until("two failed renewals, then a good one", PATIENCE, || {
        let seen = log.of(&blip);
        let failed = seen
            .iter()
            .position(|seen| matches!(seen, Seen::RenewalFailed { .. }));
        failed.is_some_and(|at| seen[at..].contains(&Seen::Renewed))
    });
    let failures = log.count(&blip, |seen| matches!(seen, Seen::RenewalFailed { .. }));
    assert_eq!(failures, 2, "{:?}", log.of(&blip));
    let lease = guard.detach();
    assert_eq!(log.of(&blip).last(), Some(&Seen::Detached));
    assert!(locker.backend().release(&lease.lock_id).unwrap());
}
