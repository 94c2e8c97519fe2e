//! Listing on the Firestore emulator beyond the contract: pages follow one another past
//! expired documents (liveness is decided by the client), and a listing reads at most
//! `MAX_LIST_PAGES` pages, then says it stopped.

use std::time::Duration;

use syncguard::firestore::{FirestoreBackend, MAX_LIST_PAGES};
use syncguard::{Clock as _, Coverage, LeaseKind, LockBackend, ManualClock, SystemClock};

use crate::support::{lease, shared_firestore_builder, unique};

fn backend_on(clock: &ManualClock) -> FirestoreBackend {
    shared_firestore_builder()
        .clock(clock.clone())
        .build()
        .expect("a Firestore backend for the emulator")
}

fn listed(backend: &FirestoreBackend, prefix: &str, limit: usize) -> (Vec<String>, Coverage) {
    let listed = backend.list_raw(prefix, LeaseKind::Lock, limit).unwrap();
    (
        listed.locks.into_iter().map(|lock| lock.key).collect(),
        listed.coverage,
    )
}

#[test]
fn pages_pass_expired_documents_up_to_the_page_bound() {
    let clock = ManualClock::new(SystemClock.now_ms());
    let backend = backend_on(&clock);
    let prefix = format!("{}:", unique("fs-list"));
    // Expired documents sort first: a listing of few locks must page past them.
    let expired_count = 2 * MAX_LIST_PAGES + 1;
    let expired: Vec<_> = (0..expired_count)
        .map(|n| lease(backend.acquire(&format!("{prefix}e{n:02}"), Duration::from_secs(1))))
        .collect();
    clock.advance(Duration::from_secs(10));
    let live_keys: Vec<String> = (1..=3).map(|n| format!("{prefix}live{n}")).collect();
    let live: Vec<_> = live_keys
        .iter()
        .map(|key| lease(backend.acquire(key, Duration::from_secs(60))))
        .collect();

    // One request for all, with room to spare.
    assert_eq!(
        listed(&backend, &prefix, 100),
        (live_keys.clone(), Coverage::Complete)
    );
    // Pages of three: seven of expired documents, then the live ones.
    assert_eq!(
        listed(&backend, &prefix, 2),
        (live_keys[..2].to_vec(), Coverage::LimitReached)
    );
    assert_eq!(
        listed(&backend, &format!("{prefix}live"), 1),
        (live_keys[..1].to_vec(), Coverage::LimitReached)
    );
    // Pages of two: the bound is reached while every document read is expired.
    let before = backend.stats().requests;
    assert_eq!(
        listed(&backend, &prefix, 1),
        (Vec::new(), Coverage::WorkBoundReached)
    );
    assert_eq!(
        backend.stats().requests - before,
        MAX_LIST_PAGES as u64,
        "one runQuery per page"
    );

    for lease in &live {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    for lease in &expired {
        assert!(!backend.release(&lease.lock_id).unwrap());
    }
    assert_eq!(
        listed(&backend, &prefix, 100),
        (Vec::new(), Coverage::Complete)
    );
}
