//! Several keys at once on Firestore (issue 35): a set is decided on one `batchGet` of every
//! key's lock and fence counter documents and taken in one commit, on documents the TypeScript
//! SyncGuard wrote too; a commit whose answer is lost leaves every key's lease in doubt, and
//! the `Locker` frees each of them. Through a forwarding stub in front of the emulator that
//! counts (and may drop) requests: the reads and writes are real.

use std::time::Duration;

use serde_json::{Value, json};
use syncguard::driver::{
    Acquisition, Acquisitions, Driver as _, DriverExt as _, Key, KeySet, LeaseKind, Line, LockId,
    Mode, Permits, Request, Ttl,
};
use syncguard::testing::support::wait_until;
use syncguard::{
    Clock as _, Heartbeat, LockBackend as _, LockOptions, Locker, Lookup, SystemClock,
};

use crate::support::{
    FaultyFirestore, Injected, TTL, raw_document, shared_firestore_backend, unique, write_document,
};

/// `count` keys of a prefix of their own.
fn keys(name: &str, count: usize) -> Vec<String> {
    let prefix = unique(name);
    (0..count).map(|i| format!("{prefix}:{i}")).collect()
}

/// The requests of each verb `faulty` received while `call` ran: (batchGet, commit).
fn requests<T>(faulty: &FaultyFirestore, call: impl FnOnce() -> T) -> (T, [usize; 2]) {
    let before = [faulty.count("batchGet"), faulty.count("commit")];
    let answer = call();
    let after = [faulty.count("batchGet"), faulty.count("commit")];
    (answer, [after[0] - before[0], after[1] - before[1]])
}

/// A set of eight free keys: one read and one commit, every key held with its own lease
/// and its own fence; the same set again, while held, one read and nothing written.
#[test]
fn a_set_of_eight_keys_is_one_read_and_one_commit() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let names = keys("multi-eight", 8);
    let set = KeySet::new(&names).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let (taken, sent) = requests(&faulty, || backend.try_acquire(&Request::all(&set, ttl)));
    assert_eq!(sent, [1, 1], "(batchGet, commit) for a set of eight");
    let Acquisitions::Acquired(leases) = taken.unwrap() else {
        panic!("eight free keys are taken");
    };
    assert_eq!(leases.len(), 8);
    let direct = shared_firestore_backend();
    for (key, (lease, version)) in set.iter().zip(&leases) {
        let record = direct
            .lookup_raw(Lookup::Key(key.as_str()))
            .unwrap()
            .expect("held");
        assert_eq!(record.lock_id, lease.lock_id, "{key}");
        assert_eq!(record.info.fence, lease.fence, "{key}");
        assert!(version.is_some(), "{key}: the version a renewal goes by");
    }
    let (again, sent) = requests(&faulty, || backend.try_acquire(&Request::all(&set, ttl)));
    assert_eq!(again.unwrap(), Acquisitions::locked_at(None));
    assert_eq!(sent, [1, 0], "a held set is refused on its one read");
    for (lease, _) in &leases {
        assert!(direct.release(&lease.lock_id).unwrap());
    }
}

/// A waiter refused on a set with one key held stands in line on that key alone (its
/// ticket answered) in one commit of that key's counter document, and takes nothing; asked
/// again at once, its place is fresh: one read, nothing written. Given the key, it is
/// granted the whole set, and its place is gone.
#[test]
fn a_refused_waiter_writes_its_place_and_nothing_else() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let names = keys("multi-waiter", 3);
    let set = KeySet::new(&names).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let direct = shared_firestore_backend();
    let held = crate::support::lease(direct.acquire(&names[1], TTL));
    let place = LockId::generate();
    let (refused, sent) = requests(&faulty, || {
        backend.try_acquire(&Request::all(&set, ttl).line(Line::Wait(&place)))
    });
    let Acquisitions::Locked {
        ticket: Some(ticket),
        ..
    } = refused.unwrap()
    else {
        panic!("a waiter refused gets its ticket");
    };
    assert_eq!(sent, [1, 1], "(batchGet, commit) of a refused waiter");
    for (i, key) in names.iter().enumerate() {
        let line = direct
            .find_line(&Key::new(key).unwrap(), LeaseKind::Lock)
            .unwrap();
        if i == 1 {
            assert_eq!(line.len(), 1, "{key}: the waiter stands on the held key");
            assert_eq!(line[0].ticket, ticket);
        } else {
            assert!(line.is_empty(), "{key}: no place on a free key");
            assert!(!direct.is_locked(key).unwrap(), "{key}: nothing taken");
        }
    }
    let (refused, sent) = requests(&faulty, || {
        backend.try_acquire(&Request::all(&set, ttl).line(Line::WaitAt(&place, ticket)))
    });
    assert_eq!(
        refused.unwrap(),
        Acquisitions::Locked {
            ticket: Some(ticket),
            position: Some(0),
        }
    );
    assert_eq!(sent, [1, 0], "a fresh place is not written again");
    assert!(direct.release(&held.lock_id).unwrap());
    let granted = backend
        .try_acquire(&Request::all(&set, ttl).line(Line::WaitAt(&place, ticket)))
        .unwrap();
    let Acquisitions::Acquired(leases) = granted else {
        panic!("the first in line is granted once the key is free");
    };
    assert!(
        direct
            .waiters(&names[1], LeaseKind::Lock)
            .unwrap()
            .is_empty(),
        "its place left"
    );
    for (lease, _) in &leases {
        assert!(direct.release(&lease.lock_id).unwrap());
    }
}

/// The fields of a lock and of its fence counter as the TypeScript SyncGuard writes them:
/// `key` held by `lock_id` until `expires_at_ms`, with fence 7.
fn typescript_documents(key: &str, lock_id: &str, expires_at_ms: i64) -> [Value; 2] {
    let fence = "000000000000007";
    [
        json!({
            "lockId": { "stringValue": lock_id },
            "expiresAtMs": { "integerValue": expires_at_ms.to_string() },
            "acquiredAtMs": { "integerValue": (expires_at_ms - 30_000).to_string() },
            "key": { "stringValue": key },
            "fence": { "stringValue": fence },
        }),
        json!({ "fence": { "stringValue": fence }, "keyDebug": { "stringValue": key } }),
    ]
}

/// A set over keys whose documents the TypeScript SyncGuard wrote: refused while its lock is
/// live; once it has expired, taken with its key's sequence going on (fence 8), the lock
/// document written in the shape the TypeScript SyncGuard reads.
#[test]
fn a_set_on_documents_the_typescript_syncguard_wrote() {
    let backend = shared_firestore_backend();
    let names = keys("multi-typescript", 2);
    let set = KeySet::new(&names).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let (lock_doc, fence_doc) = (
        backend.lock_document_id(&names[0]).unwrap(),
        backend.fence_document_id(&names[0]).unwrap(),
    );
    let now = SystemClock.now_ms();
    let [lock, counter] = typescript_documents(&names[0], "ts-lock-id", now + 60_000);
    write_document("locks", &lock_doc, lock);
    write_document("fence_counters", &fence_doc, counter);
    assert_eq!(
        backend.try_acquire(&Request::all(&set, ttl)).unwrap(),
        Acquisitions::locked_at(None),
        "the TypeScript lock is live"
    );
    assert!(!backend.is_locked(&names[1]).unwrap(), "nothing taken");

    let [lock, counter] = typescript_documents(&names[0], "ts-lock-id", now - 60_000);
    write_document("locks", &lock_doc, lock);
    write_document("fence_counters", &fence_doc, counter);
    let Acquisitions::Acquired(leases) = backend.try_acquire(&Request::all(&set, ttl)).unwrap()
    else {
        panic!("the TypeScript lock has expired");
    };
    assert_eq!(leases[0].0.fence.to_string(), "000000000000008");
    let stored = raw_document("locks", &lock_doc).expect("the lock document");
    let fields = stored["fields"].as_object().unwrap();
    let mut shape: Vec<&str> = fields.keys().map(String::as_str).collect();
    shape.sort_unstable();
    assert_eq!(
        shape,
        ["acquiredAtMs", "expiresAtMs", "fence", "key", "lockId"]
    );
    assert_eq!(
        fields["lockId"]["stringValue"],
        leases[0].0.lock_id.as_str()
    );
    assert_eq!(fields["fence"]["stringValue"], "000000000000008");
    let counter = raw_document("fence_counters", &fence_doc).expect("the counter");
    assert_eq!(counter["fields"]["fence"]["stringValue"], "000000000000008");
    assert_eq!(
        counter["fields"]["keyDebug"]["stringValue"],
        names[0].as_str()
    );
    for (lease, _) in &leases {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}

/// A set's commit applied, its answer lost: the error is in doubt of every key's lease, and
/// the `Locker` releases each of them in the background — every key free long before its
/// ten-minute TTL.
#[test]
fn a_set_whose_answer_is_lost_is_freed_in_the_background() {
    let faulty = FaultyFirestore::start();
    let options = LockOptions::default()
        .ttl(Duration::from_secs(600))
        .heartbeat(Heartbeat::Off);
    let locker = Locker::with_defaults(faulty.builder().build().unwrap(), options);
    let names = keys("multi-lost", 4);
    faulty.inject("commit", 1, Injected::LoseAnswer);
    let error = match locker.try_lock_all(&names) {
        Err(error) => error,
        Ok(taken) => panic!(
            "the answer was lost: {:?}",
            taken.map(|guard| guard.keys().len())
        ),
    };
    assert!(error.is_in_doubt(), "{error:?}");
    let in_doubt: Vec<Option<&str>> = error
        .in_doubt_leases()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    let expected: Vec<Option<&str>> = names.iter().map(|key| Some(key.as_str())).collect();
    assert_eq!(in_doubt, expected, "every key's lease is in doubt");
    let direct = shared_firestore_backend();
    wait_until(
        "every key of the lost set released",
        Duration::from_secs(120),
        || names.iter().all(|key| !direct.is_locked(key).unwrap()),
    );
}

/// One key follows the same rule as a set: a waiter refused again while its place is fresh
/// reads and writes nothing, so that a waiter writes the line document about once per
/// `PLACE_RENEWAL`, not at every wake-up (waiters' writes of one document collide).
#[test]
fn a_fresh_place_of_one_key_is_not_written_again() {
    let faulty = FaultyFirestore::start();
    let backend = faulty.builder().build().unwrap();
    let key = unique("fresh-place");
    let (checked, ttl) = (Key::new(&key).unwrap(), Ttl::new(TTL).unwrap());
    let held = crate::support::lease(backend.acquire(&key, TTL));
    let place = LockId::generate();
    let (refused, sent) = requests(&faulty, || {
        backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)))
    });
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    assert_eq!(sent, [1, 1], "the place taken");
    let (refused, sent) = requests(&faulty, || {
        backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)))
    });
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    assert_eq!(sent, [1, 0], "a fresh place is not written again");
    // A waiter for a shared hold, the same.
    let reader = LockId::generate();
    for expected in [[1, 1], [1, 0]] {
        let (refused, sent) = requests(&faulty, || {
            backend.acquire_one(
                &Request::one(&checked, ttl)
                    .mode(Mode::Shared)
                    .line(Line::Wait(&reader)),
            )
        });
        assert_eq!(refused.unwrap(), Acquisition::Locked);
        assert_eq!(sent, expected, "a shared waiter's place, then fresh");
    }
    for place in [&place, &reader] {
        backend
            .leave_line(&checked, LeaseKind::Lock, place)
            .unwrap();
    }
    assert!(backend.release(&held.lock_id).unwrap());
}

/// A semaphore waiter asking with a set's ticket (`Line::WaitAt`) stands in the semaphore's
/// line with that ticket, as one asking `Line::Wait` does with the next.
#[test]
fn a_semaphore_waiter_with_a_ticket_takes_its_place() {
    let backend = shared_firestore_backend();
    let key = unique("permit-wait-at");
    let (checked, ttl) = (Key::new(&key).unwrap(), Ttl::new(TTL).unwrap());
    let one = Permits::new(1).unwrap();
    let held = backend
        .acquire_one(&Request::one(&checked, ttl).mode(Mode::Permit(one)))
        .unwrap();
    let place = LockId::generate();
    let refused = backend.acquire_one(
        &Request::one(&checked, ttl)
            .mode(Mode::Permit(one))
            .line(Line::WaitAt(&place, 7)),
    );
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    let line = backend.find_line(&checked, LeaseKind::Permit).unwrap();
    assert_eq!(line.len(), 1, "its place is written: {line:?}");
    assert_eq!(
        (line[0].place_id.as_str(), line[0].ticket),
        (place.as_str(), 7)
    );
    backend
        .leave_line(&checked, LeaseKind::Permit, &place)
        .unwrap();
    let Acquisition::Acquired { lease, .. } = held else {
        panic!("a free semaphore gives its permit");
    };
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &lease.lock_id)
            .unwrap()
    );
}

/// Issue 40, item 1: a set's refused attempt was applied but its answer lost, so the waiter
/// asks again with `Line::Wait` and no ticket. It keeps the one ticket of its places (one
/// place per key, none added), is granted once the keys are free, and a single-key waiter
/// that came between (behind it in line) is served after it, not deadlocked with it.
#[test]
fn a_set_whose_refusal_was_lost_keeps_its_ticket_and_its_place() {
    let backend = shared_firestore_backend();
    let names = keys("multi-lost-refusal", 2);
    let set = KeySet::new(&names).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let first_key = Key::new(&names[0]).unwrap();
    let held: Vec<_> = names
        .iter()
        .map(|key| crate::support::lease(backend.acquire(key, TTL)))
        .collect();
    let place = LockId::generate();
    // Its answer lost: the ticket never reaches the waiter.
    let Acquisitions::Locked {
        ticket: Some(ticket),
        ..
    } = backend
        .try_acquire(&Request::all(&set, ttl).line(Line::Wait(&place)))
        .unwrap()
    else {
        panic!("a waiter refused gets its ticket");
    };
    let between = LockId::generate();
    let refused = backend.acquire_one(&Request::one(&first_key, ttl).line(Line::Wait(&between)));
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    let again = backend
        .try_acquire(&Request::all(&set, ttl).line(Line::Wait(&place)))
        .unwrap();
    assert_eq!(
        again,
        Acquisitions::Locked {
            ticket: Some(ticket),
            position: Some(0),
        },
        "the retry answers the ticket of the waiter's places"
    );
    for key in &names {
        let line = backend
            .find_line(&Key::new(key).unwrap(), LeaseKind::Lock)
            .unwrap();
        let mine: Vec<u64> = line
            .iter()
            .filter(|p| p.place_id == place.as_str())
            .map(|p| p.ticket)
            .collect();
        assert_eq!(mine, [ticket], "{key}: one place, with the one ticket");
    }
    for lease in &held {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    let refused = backend.acquire_one(&Request::one(&first_key, ttl).line(Line::Wait(&between)));
    assert_eq!(refused.unwrap(), Acquisition::Locked, "the set is ahead");
    let Acquisitions::Acquired(leases) = backend
        .try_acquire(&Request::all(&set, ttl).line(Line::Wait(&place)))
        .unwrap()
    else {
        panic!("the set, first in line, is granted once its keys are free");
    };
    for (lease, _) in &leases {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    let Acquisition::Acquired { lease, .. } = backend
        .acquire_one(&Request::one(&first_key, ttl).line(Line::Wait(&between)))
        .unwrap()
    else {
        panic!("the single-key waiter is served next");
    };
    assert!(backend.release(&lease.lock_id).unwrap());
}
