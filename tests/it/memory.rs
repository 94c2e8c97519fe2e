//! The contract suites on [`MemoryBackend`], plus memory-only tests that use a [`ManualClock`]
//! to pin down the liveness boundary exactly.

use std::time::Duration;

use crate::support::lease;
use crate::support::{extend_outcome, release_outcome};
use syncguard::driver::Outcome;
use syncguard::driver::TIME_TOLERANCE_MS;
use syncguard::{
    AcquireOutcome, LockBackend, Lookup, ManualClock, MemoryBackend, get_by_id_raw, owns,
};

syncguard::backend_contract!(syncguard::MemoryBackend::new);
syncguard::guard_contract!(syncguard::MemoryBackend::new);
syncguard::semaphore_contract!(syncguard::MemoryBackend::new);
syncguard::line_contract!(syncguard::MemoryBackend::new);
syncguard::shared_contract!(syncguard::MemoryBackend::new);
syncguard::multi_contract!(syncguard::MemoryBackend::new);
syncguard::lost_answer_contract!(syncguard::MemoryBackend::new);
syncguard::break_contract!(syncguard::MemoryBackend::new);
syncguard::watch_contract!(syncguard::MemoryBackend::new);
syncguard::leadership_contract!(syncguard::MemoryBackend::new);

/// The capacity check of the shared mode (not in `shared_contract!`: once per store, not per
/// topology).
#[test]
fn a_thousand_readers_share_a_key() {
    syncguard::testing::capacity::a_thousand_readers_share_a_key(syncguard::MemoryBackend::new());
}

/// The same backend contract through `Box<dyn LockBackend>`, proving the forwarding impl.
mod boxed {
    syncguard::backend_contract!(|| -> Box<dyn syncguard::LockBackend> {
        Box::new(syncguard::MemoryBackend::new())
    });
}

const T0: i64 = 1_700_000_000_000;

/// Seed 003 liveness predicate with TIME_TOLERANCE_MS = 1000: live at expiry + 999 ms, gone at
/// expiry + 1000 ms, for every operation.
#[test]
fn tolerance_boundary_is_exact() {
    assert_eq!(TIME_TOLERANCE_MS, 1000);
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let first = lease(backend.acquire("boundary", Duration::from_millis(100)));
    assert_eq!(
        first.expires_at_ms,
        T0 + 100,
        "expiry is now + ttl on the client clock"
    );
    let info = backend.lookup(Lookup::Key("boundary")).unwrap().unwrap();
    assert_eq!(info.acquired_at_ms, T0);
    assert_eq!(info.expires_at_ms, T0 + 100);

    clock.set(first.expires_at_ms + 999);
    assert!(
        backend.is_locked("boundary").unwrap(),
        "live 999 ms past expiry"
    );
    assert!(backend.lookup(Lookup::Key("boundary")).unwrap().is_some());
    assert!(
        backend
            .lookup(Lookup::LockId(&first.lock_id))
            .unwrap()
            .is_some()
    );
    assert!(owns(&backend, &first.lock_id).unwrap());
    assert_eq!(
        backend.acquire("boundary", Duration::from_secs(1)).unwrap(),
        AcquireOutcome::Locked,
        "a lock inside the tolerance cannot be taken over"
    );

    clock.set(first.expires_at_ms + 1000);
    assert!(
        !backend.is_locked("boundary").unwrap(),
        "gone 1000 ms past expiry"
    );
    assert_eq!(backend.lookup(Lookup::Key("boundary")).unwrap(), None);
    assert_eq!(
        backend.lookup(Lookup::LockId(&first.lock_id)).unwrap(),
        None
    );
    assert!(!owns(&backend, &first.lock_id).unwrap());
    assert_eq!(
        backend
            .extend(&first.lock_id, Duration::from_secs(10))
            .unwrap(),
        None,
        "no resurrection at the boundary"
    );
    assert!(!backend.release(&first.lock_id).unwrap());
    assert!(!backend.is_locked("boundary").unwrap());

    let second = lease(backend.acquire("boundary", Duration::from_millis(100)));
    assert_eq!(second.fence.value(), first.fence.value() + 1);
    assert_eq!(second.expires_at_ms, T0 + 1100 + 100);
}

/// Seed 003 extend: inside the tolerance the lock is still live, so extend succeeds and sets
/// expiry to exactly now + ttl.
#[test]
fn extend_inside_the_tolerance_succeeds() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let held = lease(backend.acquire("grace", Duration::from_millis(100)));
    clock.set(held.expires_at_ms + 999);
    let extended = backend
        .extend(&held.lock_id, Duration::from_secs(5))
        .unwrap();
    assert_eq!(extended, Some(held.expires_at_ms + 999 + 5000));
    clock.advance(Duration::from_secs(5));
    assert!(
        backend.is_locked("grace").unwrap(),
        "the extended lease is live"
    );
    assert!(backend.release(&held.lock_id).unwrap());
}

/// Seed 003 "TTL Update Semantics", exactly: extend sets expiry to now + ttl, replacing the rest.
#[test]
fn extend_replaces_exactly() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let held = lease(backend.acquire("replace", Duration::from_secs(60)));
    assert_eq!(held.expires_at_ms, T0 + 60_000);
    clock.advance(Duration::from_secs(10));
    let extended = backend
        .extend(&held.lock_id, Duration::from_secs(5))
        .unwrap();
    assert_eq!(extended, Some(T0 + 10_000 + 5_000));
    let info = backend
        .lookup(Lookup::LockId(&held.lock_id))
        .unwrap()
        .unwrap();
    assert_eq!(info.expires_at_ms, T0 + 15_000);
    assert_eq!(info.acquired_at_ms, T0, "extend keeps the acquisition time");
    clock.set(T0 + 15_000 + 1000);
    assert!(
        !backend.is_locked("replace").unwrap(),
        "the shortened lease ended"
    );
}

/// Seed 003 telemetry reasons: the memory backend tells expired from not-found for free.
#[test]
fn failure_reasons() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let held = lease(backend.acquire("reasons", Duration::from_millis(10)));
    clock.advance(Duration::from_secs(2));
    assert_eq!(
        release_outcome(&backend, &held.lock_id).unwrap(),
        Outcome::Expired
    );
    assert_eq!(
        release_outcome(&backend, &held.lock_id).unwrap(),
        Outcome::NotFound
    );
    assert_eq!(
        extend_outcome(
            &backend,
            &syncguard::driver::generate_lock_id(),
            Duration::from_secs(1)
        )
        .unwrap(),
        Outcome::NotFound
    );
}

/// DESIGN §2 "MemoryBackend: Clone (clones share state)": locks, lock ids and fence counters.
#[test]
fn clones_share_state() {
    let clock = ManualClock::new(T0);
    let a = MemoryBackend::with_clock(clock.clone());
    let b = a.clone();
    let held = lease(a.acquire("shared", Duration::from_secs(30)));
    assert!(b.is_locked("shared").unwrap());
    assert_eq!(
        b.acquire("shared", Duration::from_secs(30)).unwrap(),
        AcquireOutcome::Locked
    );
    assert_eq!(
        b.lookup(Lookup::Key("shared")).unwrap(),
        a.lookup(Lookup::LockId(&held.lock_id)).unwrap()
    );
    assert_eq!(
        get_by_id_raw(&b, &held.lock_id).unwrap().unwrap().key,
        "shared"
    );
    assert_eq!(
        b.extend(&held.lock_id, Duration::from_secs(60)).unwrap(),
        Some(T0 + 60_000)
    );
    assert_eq!(
        a.lookup(Lookup::Key("shared"))
            .unwrap()
            .unwrap()
            .expires_at_ms,
        T0 + 60_000
    );
    assert!(b.release(&held.lock_id).unwrap(), "a clone can release");
    assert!(!a.is_locked("shared").unwrap());
    assert!(!a.release(&held.lock_id).unwrap());
    let next = lease(b.acquire("shared", Duration::from_secs(30)));
    assert_eq!(next.fence.value(), 2, "clones share fence counters");
    assert!(a.release(&next.lock_id).unwrap());
}

/// Separate `MemoryBackend::new()` instances are independent stores.
#[test]
fn separate_instances_are_independent() {
    let a = MemoryBackend::new();
    let b = MemoryBackend::new();
    let in_a = lease(a.acquire("independent", Duration::from_secs(30)));
    assert!(!b.is_locked("independent").unwrap());
    let in_b = lease(b.acquire("independent", Duration::from_secs(30)));
    assert_eq!(in_a.fence.value(), 1);
    assert_eq!(in_b.fence.value(), 1);
    assert!(!b.release(&in_a.lock_id).unwrap());
    assert!(a.is_locked("independent").unwrap());
    assert!(a.release(&in_a.lock_id).unwrap());
    assert!(b.release(&in_b.lock_id).unwrap());
}

/// Seed 003 fence monotonicity across many expiries under a manual clock (no waiting).
#[test]
fn fences_count_every_acquisition_across_expiry() {
    let clock = ManualClock::new(T0);
    let backend = MemoryBackend::with_clock(clock.clone());
    let mut last = 0;
    for round in 1..=100u64 {
        let held = lease(backend.acquire("counted", Duration::from_millis(1)));
        assert_eq!(held.fence.value(), round);
        assert!(held.fence.value() > last);
        last = held.fence.value();
        if round % 2 == 0 {
            clock.advance(Duration::from_millis(1001));
        } else {
            assert!(backend.release(&held.lock_id).unwrap());
        }
    }
}
