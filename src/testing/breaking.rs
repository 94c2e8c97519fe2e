//! The break contracts: what [`Locker::break_key`] promises on a backend that breaks locks
//! ([`Driver::break_leases`]): a live holder is removed whatever its lock id and learns at its
//! next renewal, a marker keeps its place for the delay and says who broke it and why, the
//! next grant's fence is above the broken one's and the marker's, shared holders and permits
//! are broken alike (all, or one by lock id), nothing live answers nothing held, a marker is
//! never broken, a renewal racing the break never wins over the marker, and bad input is
//! refused before any I/O.
//!
//! Several guards share one [`Locker`] in each contract, and each guard's own outcome is
//! checked: the broken ones are lost, the others are not.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crate::driver::{
    Acquisitions, BreakNote, BreakOrder, Broken, Driver, LockRecord, Request, is_marker,
};
use crate::observe::Kind;
use crate::{
    AcquireOutcome, BreakOptions, ErrorCode, Heartbeat, LockBackend, LockGuard, LockInfoDebug,
    LockOptions, Locker, Lookup, get_by_key_raw,
};

use super::observed::{EventLog, Seen};
use super::support::{
    EXPIRY_DEADLINE, LONG_TTL, PATIENCE, SHORT_TTL, acquired, assert_invalid, unique_key,
    wait_until, wait_until_unlocked,
};

/// A delay short enough to wait out (plus the 1000 ms liveness tolerance).
const SHORT_DELAY: Duration = Duration::from_millis(300);

/// Who breaks, and why, in every contract.
const BY: &str = "contract operator";
const REASON: &str = "hung; pid 4242";

/// Options for leases that live the whole test unless broken, renewed often: a break is
/// heard at the next renewal, long before the lease could run out.
fn renewed_often() -> LockOptions {
    LockOptions::default()
        .ttl(LONG_TTL)
        .heartbeat(Heartbeat::Every(Duration::from_millis(50)))
        .timeout(PATIENCE)
}

fn options() -> BreakOptions {
    BreakOptions::new().by(BY).reason(REASON)
}

/// Waits until `guard` reports its loss every way it can: `is_lost`, its `lost_token`, and
/// `check()` with `LockLost`.
fn assert_learns_of_the_break(guard: &LockGuard, what: &str) {
    let lost = guard.lost_token();
    // The token is cancelled before the loss is latched (whoever sees the loss finds the
    // token cancelled, not the other way round): wait for both.
    wait_until(&format!("{what}: the loss, at a renewal"), PATIENCE, || {
        lost.is_cancelled() && guard.is_lost()
    });
    let error = guard.check().expect_err("check() after the loss");
    assert_eq!(error.code(), ErrorCode::LockLost, "{what}: check()");
}

/// Asserts that `guard` still holds: not lost, and the store still has its lease.
fn assert_untouched(guard: &LockGuard, what: &str) {
    assert!(
        !guard.is_lost(),
        "{what}: a guard the break did not name is lost"
    );
    assert!(guard.check().is_ok(), "{what}: check()");
}

/// Asserts that a lookup of `key` shows `marker`, as it was written; answers what it shows.
fn assert_key_shows<B: LockBackend + ?Sized>(
    backend: &B,
    key: &str,
    marker: &LockRecord,
    what: &str,
) -> LockInfoDebug {
    let shown = get_by_key_raw(backend, key)
        .unwrap()
        .unwrap_or_else(|| panic!("{what}: the marker lives"));
    let written = LockInfoDebug::from(marker.clone());
    assert_eq!(shown, written, "{what}: the marker as written");
    shown
}

/// Asserts that `marker` is a break's marker by [`BY`] for [`REASON`], with a fence above
/// each of `broken`.
fn assert_marker(marker: &LockRecord, broken: &[LockRecord], what: &str) {
    assert!(is_marker(&marker.lock_id), "{what}: a marker's lock id");
    let note = BreakNote::of(marker).unwrap_or_else(|| panic!("{what}: the marker's note"));
    assert_eq!(note, BreakNote::new(BY, Some(REASON.to_owned())), "{what}");
    for holder in broken {
        assert!(!is_marker(&holder.lock_id), "{what}: a marker was broken");
        assert!(marker.fence > holder.fence, "{what}: the marker's fence");
    }
}

/// A held lock is broken whatever its lock id: its guard learns at its next renewal (lost,
/// its token cancelled, `check()` LockLost) while another guard of the same locker holds on;
/// the answer is its record; the marker in its place lasts, by default, as long as the broken
/// lease would have, says who broke it and why, is what lookups show, and keeps the key from
/// `try_lock` and `acquire` until it is released by its lock id (an operator ending the delay
/// early).
pub fn a_held_lock_is_broken_whatever_its_lock_id<B: LockBackend + 'static>(backend: B) {
    let (key, other) = (unique_key("break-lock"), unique_key("break-lock-other"));
    let locker = Locker::with_defaults(backend, renewed_often().holder("contract worker"));
    let guard = locker.lock(&key).unwrap();
    let bystander = locker.lock(&other).unwrap();
    let broken = locker.break_key(&key, &options()).unwrap();
    assert_eq!(broken.holders.len(), 1, "one holder broken");
    let held = &broken.holders[0];
    assert_eq!(held.lock_id, guard.lock_id(), "the broken holder's lock id");
    assert_eq!(held.fence, *guard.fence());
    assert_eq!(held.holder.as_deref(), Some("contract worker"));
    assert_eq!(broken.markers.len(), 1, "one marker in its place");
    let marker = &broken.markers[0];
    assert_marker(marker, &broken.holders, "the lock's marker");
    assert_eq!(
        marker.expires_at_ms, held.expires_at_ms,
        "by default the marker lasts the rest of the broken lease"
    );
    let shown = assert_key_shows(locker.backend(), &key, marker, "lookup by key");
    let note = shown.break_note().expect("the lookup's note");
    assert_eq!(
        (note.by.as_str(), note.reason.as_deref()),
        (BY, Some(REASON))
    );
    assert!(
        locker.try_lock(&key).unwrap().is_none(),
        "the marker keeps the key from a try_lock"
    );
    assert_eq!(
        locker.backend().acquire(&key, LONG_TTL).unwrap(),
        AcquireOutcome::Locked,
        "the marker keeps the key from an acquire"
    );
    assert_learns_of_the_break(&guard, "the broken lock");
    assert_untouched(&bystander, "another key's lock");
    assert!(
        !guard.release().unwrap(),
        "the broken guard's release finds nothing of its own"
    );
    assert_key_shows(
        locker.backend(),
        &key,
        marker,
        "after the broken guard's release",
    );
    assert!(
        locker.backend().release(&marker.lock_id).unwrap(),
        "an operator ends the delay early by releasing the marker"
    );
    let next = locker.try_lock(&key).unwrap().expect("free once released");
    assert!(*next.fence() > marker.fence);
    assert!(bystander.release().unwrap());
}

/// A waiter for a broken key is granted once the delay ends, with a fence above the broken
/// holder's and the marker's.
pub fn a_waiter_is_granted_when_the_delay_ends<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("break-waiter");
    let locker = Locker::with_defaults(backend, renewed_often());
    let guard = locker.lock(&key).unwrap();
    let broken = locker
        .break_key(&key, &options().delay(SHORT_DELAY))
        .unwrap();
    let marker = broken.markers.first().expect("a marker for the delay");
    let waiter = thread::spawn({
        let locker = locker.clone();
        let key = key.clone();
        move || locker.lock(&key).map(|next| next.fence().to_owned())
    });
    assert_learns_of_the_break(&guard, "the broken lock");
    let next = waiter
        .join()
        .expect("the waiter")
        .expect("granted once the marker ends");
    assert!(
        next > marker.fence,
        "the next grant's fence is above the marker's"
    );
    assert!(next > broken.holders[0].fence);
}

/// A break without a delay leaves no marker: the key is free at once, and its next grant's
/// fence is above the broken one's.
pub fn no_delay_frees_the_key_at_once<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("break-now");
    let locker = Locker::with_defaults(backend, renewed_often());
    let guard = locker.lock(&key).unwrap();
    let broken = locker.break_key(&key, &options().no_delay()).unwrap();
    assert_eq!(broken.holders.len(), 1);
    assert!(broken.markers.is_empty(), "no marker without a delay");
    let next = locker
        .try_lock(&key)
        .unwrap()
        .expect("free at once without a delay");
    assert!(next.fence() > guard.fence());
    assert_learns_of_the_break(&guard, "the broken lock");
    assert!(next.release().unwrap());
}

/// Every shared holder of a key is broken at once (another key's reader holds on); a
/// marker takes each one's place and keeps a writer out. Without a delay, a writer is
/// granted at once, with a fence above the broken readers'.
pub fn shared_holders_are_broken_all_at_once<B: LockBackend + 'static>(backend: B) {
    let (key, other) = (unique_key("break-shared"), unique_key("break-shared-other"));
    let locker = Locker::with_defaults(backend, renewed_often());
    let rw = locker.rw_lock(&key).unwrap();
    let readers = [rw.read().unwrap(), rw.read().unwrap()];
    let bystander = locker.rw_lock(&other).unwrap().read().unwrap();
    let broken = locker.break_key(&key, &options().shared()).unwrap();
    let mut broken_ids: Vec<&str> = broken.holders.iter().map(|h| h.lock_id.as_str()).collect();
    let mut reader_ids: Vec<&str> = readers.iter().map(LockGuard::lock_id).collect();
    broken_ids.sort_unstable();
    reader_ids.sort_unstable();
    assert_eq!(broken_ids, reader_ids, "both readers broken");
    assert_eq!(broken.markers.len(), 2, "a marker for each");
    for marker in &broken.markers {
        assert_marker(marker, &broken.holders, "a reader's marker");
    }
    assert!(
        rw.try_write().unwrap().is_none(),
        "the markers keep a writer out"
    );
    for reader in &readers {
        assert_learns_of_the_break(reader, "a broken reader");
    }
    assert_untouched(&bystander, "another key's reader");
    let free = unique_key("break-shared-now");
    let rw = locker.rw_lock(&free).unwrap();
    let readers = [rw.read().unwrap(), rw.read().unwrap()];
    let broken = locker
        .break_key(&free, &options().shared().no_delay())
        .unwrap();
    assert_eq!((broken.holders.len(), broken.markers.len()), (2, 0));
    let writer = rw
        .try_write()
        .unwrap()
        .expect("free at once without a delay");
    assert!(readers.iter().all(|reader| writer.fence() > reader.fence()));
    for reader in &readers {
        assert_learns_of_the_break(reader, "a reader broken without a delay");
    }
    assert!(writer.release().unwrap());
    assert!(bystander.release().unwrap());
}

/// One permit is broken by its lock id and the others hold on; then every permit is broken,
/// and the markers keep the semaphore full until they end. Markers' fences follow the
/// semaphore's own sequence.
pub fn permits_are_broken_all_or_one_by_lock_id<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("break-permits");
    let locker = Locker::with_defaults(backend, renewed_often());
    let semaphore = locker.semaphore(&key, 3).unwrap();
    let first = semaphore.acquire().unwrap();
    let second = semaphore.acquire().unwrap();
    let third = semaphore.acquire().unwrap();
    let one = locker
        .break_key(
            &key,
            &options().permits().lock_id(second.lock_id()).no_delay(),
        )
        .unwrap();
    assert_eq!(one.holders.len(), 1, "only the permit named");
    assert_eq!(one.holders[0].lock_id, second.lock_id());
    assert!(one.markers.is_empty());
    assert_learns_of_the_break(&second, "the permit named");
    assert_untouched(&first, "a permit not named");
    assert_untouched(&third, "a permit not named");
    let fourth = semaphore
        .try_acquire()
        .unwrap()
        .expect("the broken permit's place is free without a delay");
    assert!(fourth.fence() > second.fence());
    let all = locker
        .break_key(&key, &options().permits().delay(LONG_TTL))
        .unwrap();
    assert_eq!(all.holders.len(), 3, "every live permit");
    assert_eq!(all.markers.len(), 3);
    for marker in &all.markers {
        assert_marker(marker, &all.holders, "a permit's marker");
        assert!(marker.fence > *fourth.fence());
    }
    assert!(
        semaphore.try_acquire().unwrap().is_none(),
        "the markers hold every permit"
    );
    for guard in [&first, &third, &fourth] {
        assert_learns_of_the_break(guard, "a broken permit");
    }
    let shown = locker
        .backend()
        .holders_raw(&key, crate::LeaseKind::Permit)
        .unwrap();
    assert_eq!(shown.len(), 3, "the holders are the markers");
    assert!(shown.iter().all(|raw| is_marker(&raw.lock_id)));
}

/// A break of a free key, and of one whose lock has expired, answers nothing held and leaves
/// no marker: the key can be taken at once.
pub fn nothing_live_answers_nothing_held<B: LockBackend + 'static>(backend: B) {
    let (free, expired) = (unique_key("break-free"), unique_key("break-expired"));
    let locker = Locker::with_defaults(backend, renewed_often());
    for kind in [
        BreakOptions::new(),
        BreakOptions::new().shared(),
        BreakOptions::new().permits(),
    ] {
        let broken = locker.break_key(&free, &kind.by(BY)).unwrap();
        assert_eq!(broken, Broken::default(), "a free key: nothing held");
    }
    let lease = acquired(locker.backend(), &expired, SHORT_TTL);
    wait_until_unlocked(locker.backend(), &expired);
    let broken = locker.break_key(&expired, &options()).unwrap();
    assert_eq!(broken, Broken::default(), "an expired lock: nothing held");
    let next = locker
        .try_lock(&expired)
        .unwrap()
        .expect("no marker is left for an expired lock");
    assert!(*next.fence() > lease.fence);
    assert!(next.release().unwrap());
    assert!(locker.try_lock(&free).unwrap().is_some());
}

/// A repeated break answers nothing held and leaves the first marker as it is — also when it
/// names the marker's lock id, or asks for no delay: a marker is never broken.
pub fn a_repeated_break_keeps_the_first_marker<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("break-twice");
    let locker = Locker::with_defaults(backend, renewed_often());
    let guard = locker.lock(&key).unwrap();
    let first = locker.break_key(&key, &options().delay(LONG_TTL)).unwrap();
    let marker = first.markers[0].clone();
    for again in [
        options(),
        options().no_delay(),
        options().lock_id(&marker.lock_id),
    ] {
        let broken = locker.break_key(&key, &again).unwrap();
        assert_eq!(broken, Broken::default(), "a repeated break: nothing held");
        assert_key_shows(
            locker.backend(),
            &key,
            &marker,
            "the first marker, as it was",
        );
    }
    assert_learns_of_the_break(&guard, "the broken lock");
    let semaphore = locker.semaphore(&key, 1).unwrap();
    let permit = semaphore.acquire().unwrap();
    let first = locker
        .break_key(&key, &options().permits().delay(LONG_TTL))
        .unwrap();
    assert_eq!(first.markers.len(), 1);
    assert_eq!(
        locker.break_key(&key, &options().permits()).unwrap(),
        Broken::default(),
        "a permit's marker is not broken either"
    );
    assert_learns_of_the_break(&permit, "the broken permit");
}

/// A break racing a renewal, many times over: a guard with a short lease renewing every few
/// ms is broken at a different moment each round. Each round ends with the guard lost and
/// the marker in place, never with the guard's lease renewed over the marker.
pub fn a_break_racing_a_renewal_never_loses_the_marker<B: LockBackend + 'static>(backend: B) {
    let locker = Locker::with_defaults(
        backend,
        LockOptions::default()
            .ttl(Duration::from_millis(600))
            .heartbeat(Heartbeat::Every(Duration::from_millis(5))),
    );
    for round in 0..12u64 {
        let key = unique_key("break-race");
        let guard = locker.lock(&key).unwrap();
        // A different moment of the renewal cycle each round: not synchronisation.
        thread::sleep(Duration::from_micros(round * 700));
        let broken = locker.break_key(&key, &options().delay(LONG_TTL)).unwrap();
        // The heartbeat may have lost the short lease on its own first: then there was
        // nothing to break, and the round shows nothing.
        let Some(marker) = broken.markers.first() else {
            wait_until("the lease the break missed to be lost", PATIENCE, || {
                guard.is_lost()
            });
            continue;
        };
        assert_eq!(broken.holders[0].lock_id, guard.lock_id(), "round {round}");
        assert_learns_of_the_break(&guard, &format!("round {round}"));
        assert_key_shows(locker.backend(), &key, marker, &format!("round {round}"));
        assert_eq!(
            locker
                .backend()
                .lookup(Lookup::LockId(guard.lock_id()))
                .unwrap(),
            None,
            "round {round}: the guard's lease is gone"
        );
    }
}

/// Bad input — a key, a lock id, a delay, a note that cannot be stored — is refused with
/// `InvalidArgument` before the store is asked anything, and breaks nothing.
pub fn bad_input_is_refused_before_any_io<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("break-bad");
    let counted = Arc::new(CountingBreaks {
        inner: backend,
        breaks: AtomicUsize::new(0),
    });
    let locker = Locker::with_defaults(Arc::clone(&counted), renewed_often());
    let guard = locker.lock(&key).unwrap();
    let refused = [
        ("", options(), "an empty key"),
        (
            key.as_str(),
            options().lock_id("not a lock id"),
            "a lock id",
        ),
        (
            key.as_str(),
            options().delay(Duration::from_micros(1500)),
            "a delay in µs",
        ),
        (
            key.as_str(),
            options().reason("two\nlines"),
            "a reason with a newline",
        ),
        (
            key.as_str(),
            options().reason("x".repeat(300)),
            "a note too long",
        ),
        (
            key.as_str(),
            BreakOptions::new().by("a; reason: b"),
            "a breaker with the separator",
        ),
    ];
    for (at, options, what) in refused {
        assert_invalid(locker.break_key(at, &options), what);
    }
    assert_eq!(
        counted.breaks.load(Ordering::SeqCst),
        0,
        "no break reached the store"
    );
    assert_untouched(&guard, "the held lock");
    assert!(locker.try_lock(&key).unwrap().is_none(), "still held");
    assert!(guard.release().unwrap());
}

/// The locker's observers are told of each break, with what it came to: the broken fences
/// and whether markers were left, or nothing held.
pub fn breaks_are_observed<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("break-observed");
    let log = Arc::new(EventLog::default());
    let locker = Locker::with_defaults(backend, renewed_often()).with_observer(log.clone());
    let guard = locker.lock(&key).unwrap();
    locker.break_key(&key, &options().no_delay()).unwrap();
    locker.break_key(&key, &options()).unwrap();
    let breaks: Vec<Seen> = log
        .of(&key)
        .into_iter()
        .filter(|seen| matches!(seen, Seen::Broken { .. }))
        .collect();
    assert_eq!(
        breaks,
        [
            Seen::Broken {
                kind: Kind::Lock,
                fences: vec![guard.fence().value()],
                kept: false,
            },
            Seen::Broken {
                kind: Kind::Lock,
                fences: Vec::new(),
                kept: false,
            },
        ]
    );
    assert_learns_of_the_break(&guard, "the broken lock");
    wait_until("the loss to be observed", EXPIRY_DEADLINE, || {
        log.count(&key, |seen| matches!(seen, Seen::Lost { by_renewal: true })) == 1
    });
}

/// Counts the breaks that reach the store; everything goes through as it is.
struct CountingBreaks<B> {
    inner: B,
    breaks: AtomicUsize,
}

impl<B: Driver> Driver for CountingBreaks<B> {
    fn break_leases(&self, order: &BreakOrder<'_>) -> crate::Result<Broken> {
        self.breaks.fetch_add(1, Ordering::SeqCst);
        self.inner.break_leases(order)
    }

    fn try_acquire(&self, request: &Request<'_>) -> crate::Result<Acquisitions> {
        self.inner.try_acquire(request)
    }

    crate::delegate_driver!(self, &self.inner; describe, release_lease, extend_leases,
        key_is_locked, find, list_records, find_line, leave_line, watch_releases);
}
