//! Leadership contract: what [`Locker::campaign`], [`Leadership`](crate::Leadership),
//! [`Locker::leader`] and [`Locker::lead`] promise on top of any backend — one leader at a
//! time, terms that only grow, a value that can change within a term, and work that is told to
//! stop when its leadership goes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::driver::{Driver, Find, Key, LeaseKind};
use crate::{
    BreakOptions, CancelToken, ErrorCode, Fence, LeadOptions, LockBackend, LockError, LockOptions,
    Locker,
};

use super::recorder::recorded_locker;
use super::support::{PATIENCE, assert_invalid, unique_key, wait_until};

/// Campaigners on one name, each leading a few times, never lead two at once, and each term
/// is above the one before.
fn one_leader_at_a_time(lockers: &[Locker<impl Driver + 'static>], name: &str) {
    const TERMS_EACH: usize = 3;
    let leading = AtomicUsize::new(0);
    let terms: Mutex<Vec<Fence>> = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for (campaigner, locker) in lockers.iter().enumerate() {
            let (leading, terms) = (&leading, &terms);
            scope.spawn(move || {
                for _ in 0..TERMS_EACH {
                    let leadership = locker
                        .campaign(name, &format!("campaigner-{campaigner}"))
                        .unwrap();
                    assert_eq!(
                        leading.fetch_add(1, Ordering::SeqCst),
                        0,
                        "two leaders at once"
                    );
                    terms.lock().unwrap().push(leadership.term());
                    thread::yield_now();
                    leading.fetch_sub(1, Ordering::SeqCst);
                    leadership.resign().unwrap();
                }
            });
        }
    });
    let terms = terms.into_inner().unwrap();
    assert_eq!(terms.len(), lockers.len() * TERMS_EACH);
    assert!(
        terms.windows(2).all(|pair| pair[0] < pair[1]),
        "terms in the order of election: {terms:?}"
    );
}

/// Four threads of one `Locker` campaign on one name: one leader at a time, rising terms.
pub fn one_leader_at_a_time_on_one_locker<B: LockBackend + 'static>(backend: B) {
    let locker = Locker::new(backend);
    let lockers = vec![locker; 4];
    one_leader_at_a_time(&lockers, &unique_key("leader-one-locker"));
}

/// Four `Locker`s (each with its own heartbeat and wake-ups, as separate processes have)
/// campaign on one name: one leader at a time, rising terms.
pub fn one_leader_at_a_time_across_lockers<B: LockBackend + 'static>(backend: B) {
    let backend = Arc::new(backend);
    let lockers: Vec<_> = (0..4).map(|_| Locker::new(Arc::clone(&backend))).collect();
    one_leader_at_a_time(&lockers, &unique_key("leader-lockers"));
}

/// `leader()` shows nobody, then the leader's value and term (its lock's holder text and
/// fence), then nobody again after it resigns.
pub fn leader_shows_the_value_and_the_term<B: LockBackend + 'static>(backend: B) {
    let name = unique_key("leader-shown");
    let locker = Locker::new(backend);
    assert_eq!(locker.leader(&name).unwrap(), None);
    let leadership = locker.campaign(&name, "node-a:8080").unwrap();
    assert_eq!(leadership.value(), "node-a:8080");
    assert_eq!(leadership.name(), name);
    let leader = locker.leader(&name).unwrap().expect("a leader");
    assert_eq!(leader.value.as_deref(), Some("node-a:8080"));
    assert_eq!(leader.term, leadership.term());
    assert!(leader.since_ms <= leader.expires_at_ms, "{leader:?}");
    assert_eq!(leader.expires_at_ms, leadership.expires_at_ms());
    leadership.resign().unwrap();
    assert_eq!(locker.leader(&name).unwrap(), None);
}

/// `proclaim` replaces the leader's value and keeps its term; a lost leadership cannot
/// proclaim.
pub fn proclaim_changes_the_value_and_keeps_the_term<B: LockBackend + 'static>(backend: B) {
    let name = unique_key("leader-proclaim");
    let locker = Locker::new(backend);
    let leadership = locker.campaign(&name, "first").unwrap();
    let term = leadership.term();
    leadership.proclaim("second").unwrap();
    assert_eq!(leadership.value(), "second");
    assert_eq!(leadership.term(), term);
    let leader = locker.leader(&name).unwrap().expect("a leader");
    assert_eq!(leader.value.as_deref(), Some("second"));
    assert_eq!(leader.term, term);
    assert!(!leadership.is_lost());

    let lock_id = lock_id_of(locker.backend(), &name);
    assert!(locker.backend().release(&lock_id).unwrap());
    let error = leadership.proclaim("third").unwrap_err();
    assert_eq!(error.code(), ErrorCode::LockLost, "{error}");
    assert!(leadership.is_lost());
    assert_eq!(leadership.value(), "second");
}

/// A resignation, and a dropped leadership, hand the name to a waiting campaigner, whose term
/// is higher.
pub fn resign_and_drop_hand_over_with_a_higher_term<B: LockBackend + 'static>(backend: B) {
    let name = unique_key("leader-handover");
    let locker = Locker::new(backend);
    let first = locker.campaign(&name, "first").unwrap();
    let first_term = first.term();
    let second = thread::scope(|scope| {
        let waiting = scope.spawn(|| locker.campaign(&name, "second").unwrap());
        first.resign().unwrap();
        waiting.join().unwrap()
    });
    assert!(second.term() > first_term);
    let second_term = second.term();
    let third = thread::scope(|scope| {
        let waiting = scope.spawn(|| locker.campaign(&name, "third").unwrap());
        drop(second);
        waiting.join().unwrap()
    });
    assert!(third.term() > second_term);
    assert_eq!(
        locker
            .leader(&name)
            .unwrap()
            .and_then(|leader| leader.value),
        Some("third".to_owned())
    );
}

/// A leader whose lock is removed from outside (here by its lock id, read from the store) has
/// its `lead` work's token cancelled; the loop campaigns again and is elected with a higher
/// term. The loop ends when told to stop, with the leadership resigned.
pub fn lead_work_is_cancelled_when_the_lease_is_removed<B: LockBackend + 'static>(backend: B) {
    let name = unique_key("leader-removed");
    let locker = Locker::new(backend);
    let stop = CancelToken::new();
    let options = LeadOptions::default()
        .ttl(Duration::from_secs(6))
        .renew_every(Duration::from_millis(300))
        .stop(stop.clone());
    let terms: Mutex<Vec<Fence>> = Mutex::new(Vec::new());
    let ended = thread::scope(|scope| {
        let leading = scope.spawn(|| {
            locker.lead(&name, "leader", &options, |leadership, cancelled| {
                terms.lock().unwrap().push(leadership.term());
                wait_until("the work's token to be cancelled", PATIENCE * 2, || {
                    cancelled.is_cancelled()
                });
                Ok::<(), LockError>(())
            })
        });
        wait_until("a first term", PATIENCE, || {
            terms.lock().unwrap().len() == 1
        });
        let lock_id = lock_id_of(locker.backend(), &name);
        assert!(locker.backend().release(&lock_id).unwrap());
        wait_until("a second term", PATIENCE, || {
            terms.lock().unwrap().len() == 2
        });
        stop.cancel();
        leading.join().unwrap()
    });
    ended.unwrap();
    let terms = terms.into_inner().unwrap();
    assert!(terms[1] > terms[0], "{terms:?}");
    assert_eq!(locker.leader(&name).unwrap(), None, "resigned at the stop");
}

/// An operator's break of a leadership: while its marker holds the name, `leader()` shows
/// nobody; the broken leader learns at its next renewal; the next leader's term is above the
/// marker's, which is above the broken one's.
pub fn a_broken_leadership_shows_no_leader_and_the_next_term_is_higher<B: LockBackend + 'static>(
    backend: B,
) {
    let name = unique_key("leader-broken");
    let locker = Locker::new(backend);
    let options = LockOptions::default()
        .ttl(Duration::from_secs(6))
        .heartbeat(crate::Heartbeat::Every(Duration::from_millis(300)));
    let leadership = locker.campaign_with(&name, "leader", &options).unwrap();
    let options = BreakOptions::new()
        .by("the leadership contract")
        .delay(Duration::from_millis(500));
    let broken = locker.break_key(&name, &options).unwrap();
    assert_eq!(broken.holders.len(), 1, "{broken:?}");
    assert_eq!(broken.holders[0].fence, leadership.term());
    let marker = broken.markers.first().expect("a marker").fence;
    assert!(marker > leadership.term());
    assert_eq!(locker.leader(&name).unwrap(), None, "a marker leads nobody");
    wait_until("the broken leader to learn", PATIENCE, || {
        leadership.is_lost()
    });
    let next = locker.campaign(&name, "next").unwrap();
    assert!(
        next.term() > marker,
        "{:?} after a marker {marker:?}",
        next.term()
    );
    assert_eq!(
        locker.leader(&name).unwrap().map(|leader| leader.term),
        Some(next.term())
    );
}

/// When renewals stop being confirmed (they hang), `lead`'s work token is cancelled while the
/// lease is still held — its margin before the local deadline — and the next leader's term is
/// higher. Margins of seconds: no pause of a loaded machine comes near them.
pub fn lead_work_stops_before_the_lease_can_end<B: LockBackend + 'static>(backend: B) {
    let name = unique_key("leader-partitioned");
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let stop = CancelToken::new();
    let options = LeadOptions::default()
        .ttl(Duration::from_secs(9))
        .renew_every(Duration::from_millis(500))
        .margin(Duration::from_secs(5))
        .stop(stop.clone());
    let seen: Mutex<Vec<(Fence, bool)>> = Mutex::new(Vec::new());
    let ended = thread::scope(|scope| {
        let leading = scope.spawn(|| {
            locker.lead(&name, "leader", &options, |leadership, cancelled| {
                let first = seen.lock().unwrap().is_empty();
                if first {
                    recorder.hang_renewals(true);
                }
                wait_until("the work's token to be cancelled", PATIENCE * 2, || {
                    cancelled.is_cancelled()
                });
                let lost = leadership.is_lost();
                if first {
                    recorder.hang_renewals(false);
                }
                seen.lock().unwrap().push((leadership.term(), lost));
                Ok::<(), LockError>(())
            })
        });
        wait_until("a first term to end", PATIENCE * 2, || {
            !seen.lock().unwrap().is_empty()
        });
        // The second term ends at the stop; nothing else cancels it.
        wait_until("a second term", PATIENCE * 2, || {
            locker
                .leader(&name)
                .unwrap()
                .is_some_and(|leader| leader.term > seen.lock().unwrap()[0].0)
        });
        stop.cancel();
        leading.join().unwrap()
    });
    ended.unwrap();
    let seen = seen.into_inner().unwrap();
    let (first_term, lost_when_told) = seen[0];
    assert!(
        !lost_when_told,
        "the work was told only once its lease had run out"
    );
    assert!(seen[1].0 > first_term, "{seen:?}");
}

/// A bad name, value or loop option is refused with `InvalidArgument` before anything is sent;
/// so is a bad value to proclaim.
pub fn leadership_input_is_checked_before_any_io<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let name = unique_key("leader-invalid");
    let too_long = "v".repeat(257);
    for value in ["", too_long.as_str(), "a\nb", "job\u{202E}gpj.exe"] {
        assert_invalid(locker.campaign(&name, value), "campaign with a bad value");
        assert_invalid(
            locker.lead(&name, value, &LeadOptions::default(), |_, _| Ok(())),
            "lead with a bad value",
        );
    }
    assert_invalid(locker.campaign("", "value"), "campaign on an empty name");
    assert_invalid(locker.leader(""), "leader of an empty name");
    for options in [
        LeadOptions::default().ttl(Duration::ZERO),
        LeadOptions::default()
            .ttl(Duration::from_secs(3))
            .renew_every(Duration::from_secs(2))
            .margin(Duration::from_secs(1)),
        LeadOptions::default().renew_every(Duration::ZERO),
    ] {
        assert_invalid(
            locker.lead(&name, "value", &options, |_, _| Ok(())),
            &format!("lead with {options:?}"),
        );
    }
    assert!(recorder.calls().is_empty(), "{:?}", recorder.calls());

    let leadership = locker.campaign(&name, "value").unwrap();
    let sent = recorder.calls().len();
    for value in ["", too_long.as_str(), "a\u{2028}b"] {
        assert_invalid(leadership.proclaim(value), "proclaim with a bad value");
    }
    assert_eq!(recorder.calls().len(), sent, "{:?}", recorder.calls());
    assert_eq!(leadership.value(), "value");
}

/// The lock id the live lock on `name` is stored under, read from the store.
fn lock_id_of<B: LockBackend + ?Sized>(backend: &B, name: &str) -> String {
    let key = Key::new(name).unwrap();
    let records = backend.find(Find::Key(&key, LeaseKind::Lock)).unwrap();
    records.first().expect("a live lock").lock_id.clone()
}
