//! What is Firestore's own in an operator's forced release (issue 42, `Driver::break_leases`)
//! and in a leader's proclaim (a lock's renewal that replaces the holder text): the documents a
//! break leaves (a lock's marker is a lock document in the TypeScript SyncGuard's format, its
//! counter advanced; a permit's or reader's marker sits in the document they are kept in), a
//! break racing a renewal (a renewal that read before the break fails its commit's
//! precondition; one that comes after the break's read waits for the break's transaction, and
//! loses), a break whose commit answer is lost,
//! and the proclaim's version precondition. The shared `break_contract!` covers the rest.
//!
//! The races are made, not hoped for: a forwarding stub in front of the emulator runs the
//! other side's operation between one side's read and its commit.

use std::collections::BTreeSet;
use std::sync::{Arc, Condvar, Mutex};
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use syncguard::driver::{
    Acquisition, BreakDelay, Broken, Driver as _, DriverExt as _, Extension, Find, Holder, Key,
    Lease, LeaseKind, LeaseRef, LockId, LockRecord, Mode, Outcome, Request, Ttl, Version,
    is_marker,
};
use syncguard::firestore::FirestoreBackend;
use syncguard::{Clock as _, ErrorCode};

use crate::support::{
    FaultyFirestore, Injected, TTL, break_all, break_note, raw_document, shared_firestore_backend,
    unique, write_document,
};

fn ttl() -> Ttl {
    Ttl::new(TTL).unwrap()
}

/// A lease of `mode` on `key` that must be granted, with its version.
fn take(
    backend: &FirestoreBackend,
    key: &Key,
    mode: Mode,
    holder: Option<&Holder>,
) -> (Lease, Option<Version>) {
    let request = Request::one(key, ttl()).mode(mode).holder(holder);
    match backend.acquire_one(&request).unwrap() {
        Acquisition::Acquired { lease, version } => (lease, version),
        Acquisition::Locked => panic!("{key} is held"),
    }
}

fn refused(backend: &FirestoreBackend, key: &Key, mode: Mode) -> bool {
    let request = Request::one(key, ttl()).mode(mode);
    matches!(backend.acquire_one(&request).unwrap(), Acquisition::Locked)
}

fn lock_id(lease: &Lease) -> LockId {
    LockId::new(&lease.lock_id).unwrap()
}

fn lock_document(backend: &FirestoreBackend, key: &Key) -> Option<Value> {
    raw_document("locks", &backend.lock_document_id(key.as_str()).unwrap())
}

fn counter_fence(backend: &FirestoreBackend, key: &Key) -> String {
    let id = backend.fence_document_id(key.as_str()).unwrap();
    let counter = raw_document("fence_counters", &id).expect("the fence counter document");
    counter["fields"]["fence"]["stringValue"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn string_field<'a>(document: &'a Value, field: &str) -> &'a str {
    document["fields"][field]["stringValue"].as_str().unwrap()
}

fn integer_field(document: &Value, field: &str) -> i64 {
    document["fields"][field]["integerValue"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap()
}

/// Two sides of a race on one lease: a backend through a forwarding stub (whose requests
/// [`run_between`] can come between) and one straight to the emulator, which took the lease.
struct Race {
    faulty: FaultyFirestore,
    through_faulty: FirestoreBackend,
    direct: Arc<FirestoreBackend>,
    key: Key,
    lease: Lease,
    version: Option<Version>,
}

impl Race {
    fn start(name: &str) -> Race {
        Race::start_with(name, Mode::Exclusive)
    }

    /// A race on a lease of `mode`.
    fn start_with(name: &str, mode: Mode) -> Race {
        let faulty = FaultyFirestore::start();
        let through_faulty = faulty.builder().build().unwrap();
        let direct = Arc::new(shared_firestore_backend());
        let key = Key::new(&unique(name)).unwrap();
        let (lease, version) = take(&direct, &key, mode, None);
        Race {
            faulty,
            through_faulty,
            direct,
            key,
            lease,
            version,
        }
    }
}

/// Runs `between` once, when the next `verb` request through `faulty` has been answered by
/// the emulator and before its answer goes back: between one side's read and its commit.
/// What it answered, once it ran.
fn run_between<T: Send + 'static>(
    faulty: &FaultyFirestore,
    verb: &str,
    between: impl Fn() -> T + Send + Sync + 'static,
) -> Arc<Mutex<Option<T>>> {
    let answered: Arc<Mutex<Option<T>>> = Arc::default();
    let seen = Arc::clone(&answered);
    faulty.inject(
        verb,
        1,
        Injected::rewrite(move |answer| {
            *seen.lock().unwrap() = Some(between());
            answer
        }),
    );
    answered
}

/// A break of the lock on `key` (of the holder under `lock_id`, when given) breaks nothing,
/// and the lock stored is still `held_by`'s.
#[track_caller]
fn assert_break_leaves_the_lock_of(
    backend: &FirestoreBackend,
    key: &Key,
    lock_id: Option<&LockId>,
    held_by: &str,
) {
    let broken = break_all(backend, key, LeaseKind::Lock, lock_id, BreakDelay::None);
    assert_eq!(broken, Broken::default());
    let document = lock_document(backend, key).expect("the lock document");
    assert_eq!(string_field(&document, "lockId"), held_by);
}

/// A marker of a break with [`note`] at `fence`, in `holder`'s place.
#[track_caller]
fn assert_marker(marker: &LockRecord, fence: u64, holder: &LockRecord) {
    assert!(is_marker(&marker.lock_id), "{marker:?}");
    assert_eq!(marker.key, holder.key);
    assert_eq!(marker.fence.value(), fence);
    assert_eq!(marker.holder.as_deref(), Some(break_note().as_str()));
    assert!(marker.acquired_at_ms <= marker.expires_at_ms);
}

#[test]
fn a_broken_lock_leaves_a_lock_document_in_the_typescript_format_and_its_counter_advanced() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("break-lock")).unwrap();
    let holder = Holder::new("worker-7").unwrap();
    let (lease, version) = take(&backend, &key, Mode::Exclusive, Some(&holder));

    let broken = break_all(
        &backend,
        &key,
        LeaseKind::Lock,
        None,
        BreakDelay::RestOfLease,
    );

    let [held] = &broken.holders[..] else {
        panic!("one holder broken: {broken:?}")
    };
    assert_eq!(held.lock_id, lease.lock_id);
    assert_eq!(held.fence, lease.fence);
    assert_eq!(held.expires_at_ms, lease.expires_at_ms);
    assert_eq!(held.holder.as_deref(), Some("worker-7"));
    let [marker] = &broken.markers[..] else {
        panic!("one marker: {broken:?}")
    };
    assert_marker(marker, lease.fence.value() + 1, held);
    assert_eq!(
        marker.expires_at_ms, lease.expires_at_ms,
        "the rest of the lease"
    );

    // What a TypeScript client reads: a live lock, whole, and the counter at its fence.
    let document = lock_document(&backend, &key).expect("the marker's lock document");
    let fields: BTreeSet<&str> = (document["fields"].as_object().unwrap().keys())
        .map(String::as_str)
        .collect();
    assert_eq!(
        fields,
        [
            "acquiredAtMs",
            "expiresAtMs",
            "fence",
            "holder",
            "key",
            "lockId"
        ]
        .into()
    );
    assert_eq!(string_field(&document, "lockId"), marker.lock_id);
    assert_eq!(string_field(&document, "key"), key.as_str());
    assert_eq!(string_field(&document, "fence"), marker.fence.to_string());
    assert_eq!(string_field(&document, "holder"), break_note().as_str());
    assert_eq!(
        integer_field(&document, "expiresAtMs"),
        marker.expires_at_ms
    );
    assert_eq!(
        integer_field(&document, "acquiredAtMs"),
        marker.acquired_at_ms
    );
    assert_eq!(counter_fence(&backend, &key), marker.fence.to_string());
    assert_eq!(
        backend.find(Find::Key(&key, LeaseKind::Lock)).unwrap(),
        vec![marker.clone()]
    );

    // The broken holder learns at its next renewal, by its version or by its lock id; the
    // key stays taken; a marker is never broken.
    let id = lock_id(&lease);
    let by_version = LeaseRef::new(&id)
        .with_key(&key)
        .with_version(version.as_ref());
    assert_eq!(
        backend.extend_lease(by_version, ttl()).unwrap(),
        Outcome::NotFound
    );
    assert_eq!(
        backend.extend_lease(LeaseRef::new(&id), ttl()).unwrap(),
        Outcome::NotFound
    );
    assert!(refused(&backend, &key, Mode::Exclusive));
    assert_break_leaves_the_lock_of(&backend, &key, None, &marker.lock_id);
}

#[test]
fn a_lock_broken_without_delay_is_deleted_and_the_next_fence_is_higher() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("break-no-delay")).unwrap();
    let (lease, _) = take(&backend, &key, Mode::Exclusive, None);
    let other = Key::new(&unique("break-no-delay-other")).unwrap();
    let (bystander, _) = take(&backend, &other, Mode::Exclusive, None);

    let broken = break_all(&backend, &key, LeaseKind::Lock, None, BreakDelay::None);

    assert_eq!(broken.holders.len(), 1);
    assert!(broken.markers.is_empty());
    assert!(lock_document(&backend, &key).is_none());
    assert_eq!(counter_fence(&backend, &key), lease.fence.to_string());
    let (next, _) = take(&backend, &key, Mode::Exclusive, None);
    assert!(next.fence > lease.fence);
    // Another key's lock is not touched, nor is a lock asked for by another lock id.
    let stranger = LockId::generate();
    assert_break_leaves_the_lock_of(&backend, &other, Some(&stranger), &bystander.lock_id);
}

#[test]
fn an_expired_lock_met_is_removed_and_not_answered() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("break-expired")).unwrap();
    let now = syncguard::SystemClock.now_ms();
    let fence = "000000000000004";
    write_document(
        "locks",
        &backend.lock_document_id(key.as_str()).unwrap(),
        json!({
            "lockId": { "stringValue": LockId::generate().as_str() },
            "expiresAtMs": { "integerValue": (now - 60_000).to_string() },
            "acquiredAtMs": { "integerValue": (now - 90_000).to_string() },
            "key": { "stringValue": key.as_str() },
            "fence": { "stringValue": fence },
        }),
    );

    let broken = break_all(
        &backend,
        &key,
        LeaseKind::Lock,
        None,
        BreakDelay::RestOfLease,
    );

    assert_eq!(broken, Broken::default());
    assert!(lock_document(&backend, &key).is_none(), "removed");
}

/// Nothing held, nothing written: no document is created for a key never used, of any kind
/// (a semaphore or a counter that was never written has no fence yet).
#[test]
fn a_break_of_a_key_never_used_answers_nothing_and_writes_nothing() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("break-never-used")).unwrap();
    for kind in [LeaseKind::Lock, LeaseKind::Shared, LeaseKind::Permit] {
        let broken = break_all(&backend, &key, kind, None, BreakDelay::RestOfLease);
        assert_eq!(broken, Broken::default(), "{kind:?}");
    }
    assert!(lock_document(&backend, &key).is_none());
    let counter_id = backend.fence_document_id(key.as_str()).unwrap();
    assert!(raw_document("fence_counters", &counter_id).is_none());
    assert!(raw_document("locks_semaphores", key.as_str()).is_none());
}

#[test]
fn broken_shared_holders_are_replaced_by_readers_at_the_locks_next_fences() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("break-shared")).unwrap();
    let (first, _) = take(&backend, &key, Mode::Shared, None);
    let (second, _) = take(&backend, &key, Mode::Shared, None);
    let ttl_5s = Ttl::new(std::time::Duration::from_secs(5)).unwrap();

    let one = break_all(
        &backend,
        &key,
        LeaseKind::Shared,
        Some(&lock_id(&first)),
        BreakDelay::For(ttl_5s),
    );

    assert_eq!(one.holders.len(), 1);
    assert_eq!(one.holders[0].lock_id, first.lock_id);
    assert_marker(&one.markers[0], second.fence.value() + 1, &one.holders[0]);
    assert_eq!(
        one.markers[0].expires_at_ms - one.markers[0].acquired_at_ms,
        5_000
    );
    // The lock's counter moved, as a reader's acquisition moves it.
    assert_eq!(
        counter_fence(&backend, &key),
        one.markers[0].fence.to_string()
    );
    let readers = backend.find(Find::Key(&key, LeaseKind::Shared)).unwrap();
    let ids: Vec<&str> = readers.iter().map(|r| r.lock_id.as_str()).collect();
    assert_eq!(ids, [second.lock_id.as_str(), &one.markers[0].lock_id]);
    // A writer stays out while the marker holds.
    assert!(refused(&backend, &key, Mode::Exclusive));

    let rest = break_all(
        &backend,
        &key,
        LeaseKind::Shared,
        None,
        BreakDelay::RestOfLease,
    );
    assert_eq!(rest.holders.len(), 1, "the marker is not broken: {rest:?}");
    assert_eq!(rest.holders[0].lock_id, second.lock_id);
    assert_marker(
        &rest.markers[0],
        one.markers[0].fence.value() + 1,
        &rest.holders[0],
    );
    let id = lock_id(&second);
    assert_eq!(
        backend
            .extend_lease(LeaseRef::shared(&id, &key), ttl())
            .unwrap(),
        Outcome::NotFound
    );
}

#[test]
fn broken_permits_are_replaced_by_permits_at_the_semaphores_next_fences() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("break-permits")).unwrap();
    let three = Mode::permits(3).unwrap();
    let (first, _) = take(&backend, &key, three, None);
    let (second, _) = take(&backend, &key, three, None);

    let broken = break_all(
        &backend,
        &key,
        LeaseKind::Permit,
        None,
        BreakDelay::RestOfLease,
    );

    let broken_ids: Vec<&str> = broken.holders.iter().map(|h| h.lock_id.as_str()).collect();
    assert_eq!(broken_ids, [first.lock_id.as_str(), &second.lock_id]);
    assert_eq!(broken.markers.len(), 2);
    for (at, (marker, holder)) in broken.markers.iter().zip(&broken.holders).enumerate() {
        assert_marker(marker, second.fence.value() + 1 + at as u64, holder);
        assert_eq!(marker.expires_at_ms, holder.expires_at_ms);
    }
    let semaphore = raw_document("locks_semaphores", key.as_str()).expect("the semaphore");
    assert_eq!(
        string_field(&semaphore, "fence"),
        broken.markers[1].fence.to_string(),
        "the semaphore's own counter moved"
    );
    // The markers hold their places: one permit of three is left.
    let (third, _) = take(&backend, &key, three, None);
    assert_eq!(third.fence.value(), second.fence.value() + 3);
    assert!(refused(&backend, &key, three));
    // The lock of the same key is another sequence, untouched.
    let (lock, _) = take(&backend, &key, Mode::Exclusive, None);
    assert_eq!(lock.fence.value(), 1);
}

/// A renewal whose read comes before a break and whose commit after it: the commit's
/// precondition fails, the renewal reads again and finds the lease gone. The marker stands as
/// written.
#[test]
fn a_renewal_racing_a_break_loses_its_lease_and_never_renews_the_marker() {
    let Race {
        faulty,
        through_faulty: renewer,
        direct: breaker,
        key,
        lease,
        ..
    } = Race::start("break-vs-renewal");
    let (in_between, racing_key) = (Arc::clone(&breaker), key.clone());
    // The renewal without a version finds the lease by its lock id (runQuery), then commits:
    // the break lands in between.
    let broken = run_between(&faulty, "runQuery", move || {
        let delay = BreakDelay::RestOfLease;
        break_all(&in_between, &racing_key, LeaseKind::Lock, None, delay)
    });

    let id = lock_id(&lease);
    let outcome = renewer.extend_lease(LeaseRef::new(&id), ttl()).unwrap();

    assert_eq!(outcome, Outcome::NotFound, "the lease is lost, not renewed");
    assert_eq!(faulty.pending(), 0, "the break ran between read and commit");
    assert!(
        faulty.count("commit") >= 1,
        "the renewal's commit was tried"
    );
    let broken = broken.lock().unwrap().take().expect("the break's answer");
    let document = lock_document(&breaker, &key).unwrap();
    assert_eq!(string_field(&document, "lockId"), broken.markers[0].lock_id);
    assert_eq!(
        integer_field(&document, "expiresAtMs"),
        broken.markers[0].expires_at_ms,
        "the marker's expiry as the break wrote it"
    );
}

/// A renewal (of a lock, a permit, a shared hold) that comes after a break's read and before
/// its commit waits for the break (the break reads in a read-write transaction, which locks
/// the documents it read): the break reads once and breaks the lease as it read it, and the
/// renewal finds its lease gone. A renewal that landed in between instead would fail the
/// break's commit every time it renews back to back, and keep the break out.
#[test]
fn a_renewal_after_a_breaks_read_waits_for_the_break_and_finds_its_lease_gone() {
    for (kind, mode) in [
        (LeaseKind::Lock, Mode::Exclusive),
        (LeaseKind::Permit, Mode::permits(2).unwrap()),
        (LeaseKind::Shared, Mode::Shared),
    ] {
        renewal_after_a_breaks_read(kind, mode);
    }
}

fn renewal_after_a_breaks_read(kind: LeaseKind, mode: Mode) {
    let Race {
        faulty,
        through_faulty: breaker,
        direct: renewer,
        key,
        lease,
        version,
    } = Race::start_with("renewal-during-break", mode);
    let renewal = Arc::new(Renewal::default());
    let in_between = Arc::clone(&renewal);
    let racing_key = key.clone();
    let (racing_id, racing_version) = (lock_id(&lease), version.clone());
    faulty.inject(
        "batchGet",
        1,
        Injected::rewrite(move |answer| {
            let (renewer, renewal) = (Arc::clone(&renewer), Arc::clone(&in_between));
            let (key, id, version) = (
                racing_key.clone(),
                racing_id.clone(),
                racing_version.clone(),
            );
            thread::spawn(move || {
                let lease = LeaseRef::new(&id)
                    .with_key(&key)
                    .with_kind(kind)
                    .with_version(version.as_ref());
                let longer = Ttl::new(TTL * 2).unwrap();
                renewal.answer(
                    renewer
                        .extend_lease(lease, longer)
                        .map_err(|e| e.to_string()),
                );
            });
            // Ample time for a renewal that does not wait (a few ms) to land before the
            // break's commit; one that waits for the break lands after it, whatever the time.
            in_between.note_whether_answered_within(RENEWAL_TIME);
            answer
        }),
    );

    let broken = break_all(&breaker, &key, kind, None, BreakDelay::RestOfLease);

    assert_eq!(
        faulty.pending(),
        0,
        "{kind:?}: the renewal came between the break's read and commit"
    );
    assert!(
        !renewal.landed_first(),
        "{kind:?}: the renewal waited for the break's commit"
    );
    assert_eq!(faulty.count("batchGet"), 1, "{kind:?}: the break read once");
    assert_eq!(broken.holders.len(), 1, "{kind:?}: {broken:?}");
    assert_eq!(broken.holders[0].expires_at_ms, lease.expires_at_ms);
    assert_eq!(broken.markers[0].expires_at_ms, lease.expires_at_ms);
    assert_eq!(
        renewal.awaited(),
        Ok(Outcome::NotFound),
        "{kind:?}: the renewal found its lease broken"
    );
    let stored = breaker.find(Find::Key(&key, kind)).unwrap();
    assert_eq!(
        stored, broken.markers,
        "{kind:?}: the markers as the break wrote them"
    );
}

/// How long a renewal that does not wait for anything is given to land.
const RENEWAL_TIME: Duration = Duration::from_secs(1);

/// A renewal run on another thread: its answer, once it came, and whether it came while the
/// race's other side still waited.
#[derive(Default)]
struct Renewal {
    answer: Mutex<Option<Result<Outcome<Extension>, String>>>,
    answered: Condvar,
    landed_first: Mutex<bool>,
}

impl Renewal {
    fn answer(&self, outcome: Result<Outcome<Extension>, String>) {
        *self.answer.lock().unwrap() = Some(outcome);
        self.answered.notify_all();
    }

    /// Waits up to `patience` for the answer, and notes whether it came
    /// ([`landed_first`](Renewal::landed_first)).
    fn note_whether_answered_within(&self, patience: Duration) {
        let answer = self.answer.lock().unwrap();
        let (answer, _) = self
            .answered
            .wait_timeout_while(answer, patience, |answer| answer.is_none())
            .unwrap();
        *self.landed_first.lock().unwrap() = answer.is_some();
    }

    fn landed_first(&self) -> bool {
        *self.landed_first.lock().unwrap()
    }

    /// The answer, once it comes.
    fn awaited(&self) -> Result<Outcome<Extension>, String> {
        let answer = self.answer.lock().unwrap();
        let mut answer = self
            .answered
            .wait_while(answer, |answer| answer.is_none())
            .unwrap();
        answer.take().expect("answered")
    }
}

/// A break whose commit went through but whose answer was lost reads again, finds its own
/// markers, and answers what it did (not "nothing held").
#[test]
fn a_break_whose_answer_is_lost_recognises_its_own_markers() {
    let faulty = FaultyFirestore::start();
    let breaker = faulty.builder().build().unwrap();
    let backend = shared_firestore_backend();
    for (kind, mode) in [
        (LeaseKind::Lock, Mode::Exclusive),
        (LeaseKind::Permit, Mode::permits(2).unwrap()),
        (LeaseKind::Shared, Mode::Shared),
    ] {
        let key = Key::new(&unique("break-lost-answer")).unwrap();
        let (lease, _) = take(&backend, &key, mode, None);
        faulty.inject("commit", 1, Injected::LoseAnswer);

        let broken = break_all(&breaker, &key, kind, None, BreakDelay::RestOfLease);

        assert_eq!(faulty.pending(), 0, "{kind:?}: the answer was lost");
        assert_eq!(broken.holders.len(), 1, "{kind:?}: {broken:?}");
        assert_eq!(broken.holders[0].lock_id, lease.lock_id);
        let stored = backend.find(Find::Key(&key, kind)).unwrap();
        assert_eq!(stored, broken.markers, "{kind:?}");
    }
}

#[test]
fn a_proclaim_replaces_the_holder_text_under_the_version_precondition() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("proclaim")).unwrap();
    let first = Holder::new("leader at 10.0.0.1").unwrap();
    let (lease, version) = take(&backend, &key, Mode::Exclusive, Some(&first));
    let id = lock_id(&lease);

    // By its version: one request, the expiry and the holder in one write.
    let second = Holder::new("leader at 10.0.0.2").unwrap();
    let before = backend.stats().requests;
    let proclaim = LeaseRef::new(&id)
        .with_key(&key)
        .with_version(version.as_ref())
        .with_holder(&second);
    let extension = backend.extend_lease(proclaim, ttl()).unwrap();
    let extension = extension.applied().expect("proclaimed");
    assert_eq!(backend.stats().requests - before, 1);
    let document = lock_document(&backend, &key).unwrap();
    assert_eq!(string_field(&document, "holder"), second.as_str());
    assert_eq!(
        integer_field(&document, "expiresAtMs"),
        extension.expires_at_ms
    );
    assert_eq!(string_field(&document, "lockId"), lease.lock_id);
    assert_eq!(string_field(&document, "fence"), lease.fence.to_string());

    // A stale version (the document changed since) is never written over: the proclaim
    // reads again by lock id, and still holds the lock, so it applies.
    let third = Holder::new("leader at 10.0.0.3").unwrap();
    let stale = LeaseRef::new(&id)
        .with_key(&key)
        .with_version(version.as_ref())
        .with_holder(&third);
    assert!(backend.extend_lease(stale, ttl()).unwrap().is_applied());
    let record = backend.find(Find::LockId(&id)).unwrap();
    assert_eq!(record[0].holder.as_deref(), Some(third.as_str()));

    // Once the lock is another's, a proclaim by the old version changes nothing of it.
    let broken = break_all(&backend, &key, LeaseKind::Lock, None, BreakDelay::None);
    assert_eq!(broken.holders.len(), 1);
    let (next, _) = take(&backend, &key, Mode::Exclusive, Some(&first));
    let late = LeaseRef::new(&id)
        .with_key(&key)
        .with_version(extension.version.as_ref())
        .with_holder(&second);
    assert_eq!(
        backend.extend_lease(late, ttl()).unwrap(),
        Outcome::NotFound
    );
    let document = lock_document(&backend, &key).unwrap();
    assert_eq!(string_field(&document, "lockId"), next.lock_id);
    assert_eq!(string_field(&document, "holder"), first.as_str());
}

/// A plain renewal stays the one-field write the TypeScript SyncGuard makes: the holder is
/// kept, not written.
#[test]
fn a_renewal_without_a_holder_keeps_the_stored_one() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("renew-keeps-holder")).unwrap();
    let holder = Holder::new("kept").unwrap();
    let (lease, version) = take(&backend, &key, Mode::Exclusive, Some(&holder));
    let id = lock_id(&lease);
    let plain = LeaseRef::new(&id)
        .with_key(&key)
        .with_version(version.as_ref());
    assert!(backend.extend_lease(plain, ttl()).unwrap().is_applied());
    let document = lock_document(&backend, &key).unwrap();
    assert_eq!(string_field(&document, "holder"), "kept");
}

#[test]
fn only_a_locks_holder_text_is_replaced() {
    let backend = shared_firestore_backend();
    let key = Key::new(&unique("proclaim-permit")).unwrap();
    let (permit, _) = take(&backend, &key, Mode::permits(2).unwrap(), None);
    let (reader, _) = take(&backend, &key, Mode::Shared, None);
    let holder = Holder::new("not mine to say").unwrap();
    let (permit_id, reader_id) = (lock_id(&permit), lock_id(&reader));
    let answers = backend.extend_leases(&[
        (
            LeaseRef::permit(&permit_id, &key).with_holder(&holder),
            ttl(),
        ),
        (LeaseRef::permit(&permit_id, &key), ttl()),
        (
            LeaseRef::shared(&reader_id, &key).with_holder(&holder),
            ttl(),
        ),
    ]);
    let codes: Vec<Option<ErrorCode>> = (answers.iter())
        .map(|answer| answer.as_ref().err().map(|e| e.code()))
        .collect();
    assert_eq!(
        codes,
        [
            Some(ErrorCode::InvalidArgument),
            None,
            Some(ErrorCode::InvalidArgument)
        ]
    );
    assert!(answers[1].as_ref().unwrap().is_applied());
    let permits = backend.find(Find::Key(&key, LeaseKind::Permit)).unwrap();
    assert_eq!(permits[0].holder, None);
}
