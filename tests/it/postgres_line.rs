//! The line on PostgreSQL (issue 33), against the shared cluster directly and through the
//! shared PgBouncer (transaction mode), looked at in its table: a waiting acquisition whose
//! answer is lost and which the pool repeats is one place; an acquisition of a free key with an
//! empty line writes no place; every expired place is pruned by the next acquisition of its
//! line; the lock's line and the semaphore's line of one key are two lines; a place of a key
//! nobody asks for again is swept by other keys' waiters once long expired. (The line
//! contracts run in `postgres.rs` and `pgbouncer.rs`; tables without the line in
//! `postgres_legacy.rs`.) A waiter refused with nothing to write is answered while another
//! acquisition of its key holds the key's advisory lock.

use crate::support::{self, TTL, lease, shared_postgres, shared_postgres_backend, unique};
use syncguard::LockBackend;
use syncguard::driver::{
    Acquisition, Acquisitions, Driver, DriverExt, Key, KeySet, LeaseKind, Line, LockId, Mode,
    Permits, Request, Ttl,
};
use syncguard::postgres::PostgresBackend;

support::postgres_both_ways!(
    connect: [
        a_free_key_with_an_empty_line_writes_no_place,
        every_expired_place_is_pruned,
        a_keys_lock_and_semaphore_have_a_line_each,
        a_refused_waiter_is_told_its_position,
        a_refused_set_is_told_its_position,
        a_refusal_with_nothing_to_write_waits_for_no_other_acquirer,
    ],
    upstream: [a_repeated_waiting_acquisition_is_one_place],
);

/// The rows of the default line table for `key`'s line `kind` ('lock' or 'permit'):
/// (place id, ticket), in ticket order, expired ones included.
fn stored_places(backend: &PostgresBackend, key: &str, kind: &str) -> Vec<(String, i64)> {
    shared_postgres()
        .client()
        .query(
            "SELECT place_id, ticket FROM syncguard_locks_line WHERE key = $1 AND kind = $2 \
             ORDER BY ticket",
            &[&backend.storage_key(key).unwrap(), &kind],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), row.get(1)))
        .collect()
}

fn ttl() -> Ttl {
    Ttl::new(TTL).unwrap()
}

/// A waiter's attempt at the lock on `key` with the place `place`.
fn wait(backend: &PostgresBackend, key: &str, place: &LockId) -> Acquisition {
    let key = Key::new(key).unwrap();
    backend
        .acquire_one(&Request::one(&key, ttl()).line(Line::Wait(place)))
        .unwrap()
}

/// A waiter's attempt at the acquisition of the key free, line empty: granted, and no place is
/// written — the uncontended path writes the lock and nothing more.
fn a_free_key_with_an_empty_line_writes_no_place(backend: fn() -> PostgresBackend) {
    let backend = backend();
    let key = unique("line-free");
    let place = LockId::generate();
    let Acquisition::Acquired { lease, .. } = wait(&backend, &key, &place) else {
        panic!("a free key with an empty line is granted");
    };
    assert_eq!(stored_places(&backend, &key, "lock"), []);
    assert!(backend.release(&lease.lock_id).unwrap());
}

/// Three places, two of them expired (moved back in time in the table, as a clock moving on
/// would): the next waiter's acquisition deletes both, not only the first.
fn every_expired_place_is_pruned(backend: fn() -> PostgresBackend) {
    let backend = backend();
    let key = unique("line-prune");
    let held = lease(backend.acquire(&key, TTL));
    let places: Vec<LockId> = (0..3).map(|_| LockId::generate()).collect();
    for place in &places {
        assert_eq!(wait(&backend, &key, place), Acquisition::Locked);
    }
    let stored = stored_places(&backend, &key, "lock");
    let ids: Vec<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    let expected: Vec<&str> = places.iter().map(LockId::as_str).collect();
    assert_eq!(ids, expected, "in arrival order");
    shared_postgres()
        .client()
        .execute(
            "UPDATE syncguard_locks_line SET expires_at_ms = expires_at_ms - 3600000 \
             WHERE key = $1 AND place_id <> $2",
            &[&backend.storage_key(&key).unwrap(), &places[1].as_str()],
        )
        .unwrap();
    // The next waiter to arrive prunes both, and goes behind the one live place.
    let late = LockId::generate();
    assert_eq!(wait(&backend, &key, &late), Acquisition::Locked);
    let left = stored_places(&backend, &key, "lock");
    let ids: Vec<&str> = left.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, [places[1].as_str(), late.as_str()], "{left:?}");
    assert!(backend.release(&held.lock_id).unwrap());
    // The first live place is granted, and leaves the line in the same statement.
    let Acquisition::Acquired { lease: first, .. } = wait(&backend, &key, &places[1]) else {
        panic!("the first live place is granted once the key is free");
    };
    let left = stored_places(&backend, &key, "lock");
    assert_eq!(left.len(), 1, "{left:?}");
    assert_eq!(left[0].0, late.as_str());
    let checked = Key::new(&key).unwrap();
    backend
        .leave_line(&checked, LeaseKind::Lock, &late)
        .unwrap();
    assert!(backend.release(&first.lock_id).unwrap());
    assert_eq!(stored_places(&backend, &key, "lock"), []);
}

/// A place in the lock's line of a key is not in its semaphore's line, and leaving one leaves
/// the other as it was.
fn a_keys_lock_and_semaphore_have_a_line_each(backend: fn() -> PostgresBackend) {
    let backend = backend();
    let key = unique("line-kinds");
    let checked = Key::new(&key).unwrap();
    let one = Permits::new(1).unwrap();
    let held_lock = lease(backend.acquire(&key, TTL));
    let held_permit = lease(backend.acquire_as(&key, syncguard::Mode::permits(1).unwrap(), TTL));
    let place = LockId::generate();
    assert_eq!(wait(&backend, &key, &place), Acquisition::Locked);
    let in_permit_line = backend.acquire_one(
        &Request::one(&checked, ttl())
            .mode(Mode::Permit(one))
            .line(Line::Wait(&place)),
    );
    assert_eq!(in_permit_line.unwrap(), Acquisition::Locked);
    assert_eq!(stored_places(&backend, &key, "lock").len(), 1);
    assert_eq!(stored_places(&backend, &key, "permit").len(), 1);
    backend
        .leave_line(&checked, LeaseKind::Lock, &place)
        .unwrap();
    assert_eq!(backend.find_line(&checked, LeaseKind::Lock).unwrap(), []);
    let permit_line = backend.find_line(&checked, LeaseKind::Permit).unwrap();
    assert_eq!(permit_line.len(), 1);
    assert_eq!(permit_line[0].place_id, place.as_str());
    backend
        .leave_line(&checked, LeaseKind::Permit, &place)
        .unwrap();
    assert_eq!(stored_places(&backend, &key, "permit"), []);
    assert!(backend.release(&held_lock.lock_id).unwrap());
    let released = backend.release_as(&key, LeaseKind::Permit, &held_permit.lock_id);
    assert!(released.unwrap());
}

/// `position` (issue 41), in every mode: three waiters in line behind a holder are told 0, 1
/// and 2 places ahead of theirs; once the first leaves, the others 0 and 1. A refusal that took
/// no place (`Line::Keep`, `Line::Ignore`) is told none.
fn a_refused_waiter_is_told_its_position(backend: fn() -> PostgresBackend) {
    let backend = backend();
    let one = Permits::new(1).unwrap();
    for mode in [Mode::Exclusive, Mode::Shared, Mode::Permit(one)] {
        let name = unique("line-position");
        let key = Key::new(&name).unwrap();
        let held = match mode {
            Mode::Permit(_) => {
                lease(backend.acquire_as(&name, syncguard::Mode::permits(1).unwrap(), TTL))
            }
            Mode::Exclusive | Mode::Shared => lease(backend.acquire(&name, TTL)),
        };
        let asked = Request::one(&key, ttl()).mode(mode);
        let position = |line: Line<'_>| match backend.try_acquire(&asked.line(line)).unwrap() {
            Acquisitions::Locked { ticket, position } => {
                assert_eq!(ticket, None, "one key carries no ticket");
                position
            }
            Acquisitions::Acquired(_) => panic!("{mode:?}: granted while held"),
        };
        let places: Vec<LockId> = (0..3).map(|_| LockId::generate()).collect();
        for (ahead, place) in places.iter().enumerate() {
            assert_eq!(position(Line::Wait(place)), Some(ahead as u64), "{mode:?}");
        }
        assert_eq!(position(Line::Keep), None, "{mode:?}");
        assert_eq!(position(Line::Ignore), None, "{mode:?}");
        let line = mode.kind().sequence();
        backend.leave_line(&key, line, &places[0]).unwrap();
        assert_eq!(position(Line::Wait(&places[1])), Some(0), "{mode:?}");
        assert_eq!(position(Line::Wait(&places[2])), Some(1), "{mode:?}");
        for place in &places[1..] {
            backend.leave_line(&key, line, place).unwrap();
        }
        match mode {
            Mode::Permit(_) => assert!(
                backend
                    .release_as(&name, LeaseKind::Permit, &held.lock_id)
                    .unwrap()
            ),
            Mode::Exclusive | Mode::Shared => assert!(backend.release(&held.lock_id).unwrap()),
        }
    }
}

/// `position` for several keys: how far back a set's waiter stands on the line where it stands
/// furthest back — 0, 1 and 2 for three of them behind a holder of one key, then 0 and 1 once
/// the first leaves.
fn a_refused_set_is_told_its_position(backend: fn() -> PostgresBackend) {
    let backend = backend();
    let (busy, free) = (unique("line-position-busy"), unique("line-position-free"));
    let keys = KeySet::new(&[busy.as_str(), free.as_str()]).unwrap();
    let held = lease(backend.acquire(&busy, TTL));
    let asked = Request::all(&keys, ttl());
    let position = |line: Line<'_>| match backend.try_acquire(&asked.line(line)).unwrap() {
        Acquisitions::Locked {
            ticket: Some(ticket),
            position,
        } => (ticket, position),
        refused => panic!("a set's waiter stands in line with a ticket: {refused:?}"),
    };
    let places: Vec<LockId> = (0..3).map(|_| LockId::generate()).collect();
    let mut tickets = Vec::new();
    for (ahead, place) in places.iter().enumerate() {
        let (ticket, at) = position(Line::Wait(place));
        assert_eq!(at, Some(ahead as u64));
        tickets.push(ticket);
    }
    let busy_key = Key::new(&busy).unwrap();
    backend
        .leave_line(&busy_key, LeaseKind::Lock, &places[0])
        .unwrap();
    for (ahead, (place, ticket)) in places.iter().zip(tickets).skip(1).enumerate() {
        assert_eq!(position(Line::WaitAt(place, ticket)).1, Some(ahead as u64));
    }
    for place in &places[1..] {
        backend
            .leave_line(&busy_key, LeaseKind::Lock, place)
            .unwrap();
    }
    assert!(backend.release(&held.lock_id).unwrap());
}

/// Issue 43: a waiter whose place stands fresh and whom THE RULE refuses — the key held, or
/// free with a place ahead of its own — is answered at once, with its position, while another
/// acquisition of the key holds the key's advisory lock (here a transaction of a plain client
/// takes it, as the acquisition of the waiter ahead of it does when a release wakes them all):
/// it writes nothing, so it does not queue for that lock. Without that (the `_v7` functions),
/// each of these attempts waits for the transaction, which this thread holds open, until the
/// statement times out.
fn a_refusal_with_nothing_to_write_waits_for_no_other_acquirer(backend: fn() -> PostgresBackend) {
    let backend = backend();
    let name = unique("line-unlocked");
    let key = Key::new(&name).unwrap();
    let storage_key = backend.storage_key(&name).unwrap();
    let held = lease(backend.acquire(&name, TTL));
    let (first, second) = (LockId::generate(), LockId::generate());
    assert_eq!(wait(&backend, &name, &first), Acquisition::Locked);
    assert_eq!(wait(&backend, &name, &second), Acquisition::Locked);
    let position = |place: &LockId| match backend
        .try_acquire(&Request::one(&key, ttl()).line(Line::Wait(place)))
        .unwrap()
    {
        Acquisitions::Locked { position, .. } => position,
        Acquisitions::Acquired(_) => panic!("granted out of turn"),
    };
    let mut client = shared_postgres().client();
    let mut shut_out = |check: &mut dyn FnMut()| {
        let mut transaction = client.transaction().unwrap();
        transaction
            .execute(
                "SELECT pg_advisory_xact_lock(hashtext($1))",
                &[&storage_key],
            )
            .unwrap();
        check();
        transaction.rollback().unwrap();
    };
    // The key held: both are refused, each told its place.
    shut_out(&mut || {
        assert_eq!(position(&first), Some(0));
        assert_eq!(position(&second), Some(1));
    });
    assert!(backend.release(&held.lock_id).unwrap());
    // The key free: the second is refused, the first stands ahead of it.
    shut_out(&mut || assert_eq!(position(&second), Some(1)));
    let Acquisition::Acquired { lease: granted, .. } = wait(&backend, &name, &first) else {
        panic!("the first in line is granted once the key is free");
    };
    assert_eq!(stored_places(&backend, &name, "lock").len(), 1);
    assert!(backend.release(&granted.lock_id).unwrap());
    let Acquisition::Acquired { lease: next, .. } = wait(&backend, &name, &second) else {
        panic!("the second is granted next");
    };
    assert!(backend.release(&next.lock_id).unwrap());
    assert_eq!(stored_places(&backend, &name, "lock"), []);
}

/// Issue 40, item 7: a place in the line of a key nobody asks for again (a killed waiter of a
/// per-job key) is deleted by other keys' refused waiters once it has expired long ago. Its
/// expiry is written in the past by the server's clock, as a clock moving on would make it.
/// The sweep is drawn at random, one refused attempt in eight: the attempts are bounded, so a
/// sweep that never comes fails the test instead of hanging it.
#[test]
fn a_place_of_a_key_nobody_asks_for_again_is_swept() {
    const ATTEMPTS: usize = 1000;
    let backend = shared_postgres_backend();
    let forgotten = backend.storage_key(&unique("line-forgotten")).unwrap();
    let abandoned = LockId::generate();
    let mut client = shared_postgres().client();
    client
        .execute(
            "INSERT INTO syncguard_locks_line (key, kind, place_id, expires_at_ms) \
             VALUES ($1, 'lock', $2, \
             floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - 3600000)",
            &[&forgotten, &abandoned.as_str()],
        )
        .unwrap();
    let mut left = || -> i64 {
        client
            .query_one(
                "SELECT count(*) FROM syncguard_locks_line WHERE key = $1",
                &[&forgotten],
            )
            .unwrap()
            .get(0)
    };
    let busy = unique("line-busy");
    let held = lease(backend.acquire(&busy, TTL));
    let waiter = LockId::generate();
    let mut attempts = 0;
    while left() > 0 {
        assert!(
            attempts < ATTEMPTS,
            "{attempts} refused attempts on another key later, the expired place is still there"
        );
        assert_eq!(wait(&backend, &busy, &waiter), Acquisition::Locked);
        attempts += 1;
    }
    let checked = Key::new(&busy).unwrap();
    backend
        .leave_line(&checked, LeaseKind::Lock, &waiter)
        .unwrap();
    assert!(backend.release(&held.lock_id).unwrap());
}

/// A waiting acquisition whose answer is lost with its connection (the proxy closes it as the
/// answer comes back: the server has taken the place) is repeated once by the pool on a fresh
/// connection, with the same place id: the repeat renews that place instead of taking a second
/// one. A waiter that arrives after it is behind it, and the place keeps its ticket.
fn a_repeated_waiting_acquisition_is_one_place(upstream: u16) {
    let (proxy, backend) = support::postgres_through_a_proxy(upstream);
    let other = shared_postgres_backend();
    let key = unique("line-repeat");
    let held = lease(other.acquire(&key, TTL));
    // The pool's connection is open before the answer to lose is chosen.
    assert!(!backend.is_locked(&unique("line-repeat-warm")).unwrap());
    let place = LockId::generate();
    let cuts = proxy.answers_cut();
    proxy.cut_answer_to(b"_acquire_v");
    assert_eq!(wait(&backend, &key, &place), Acquisition::Locked);
    assert_eq!(proxy.answers_cut(), cuts + 1, "an answer was lost");
    let stored = stored_places(&backend, &key, "lock");
    assert_eq!(stored.len(), 1, "one waiter, one place: {stored:?}");
    assert_eq!(stored[0].0, place.as_str());
    let later = LockId::generate();
    assert_eq!(wait(&other, &key, &later), Acquisition::Locked);
    assert_eq!(wait(&backend, &key, &place), Acquisition::Locked);
    let stored = stored_places(&backend, &key, "lock");
    let ids: Vec<&str> = stored.iter().map(|(id, _)| id.as_str()).collect();
    assert_eq!(ids, [place.as_str(), later.as_str()], "{stored:?}");
    assert!(other.release(&held.lock_id).unwrap());
    assert!(matches!(wait(&other, &key, &later), Acquisition::Locked));
    let Acquisition::Acquired { lease: first, .. } = wait(&backend, &key, &place) else {
        panic!("the first place is granted once the key is free");
    };
    assert!(backend.release(&first.lock_id).unwrap());
    let Acquisition::Acquired { lease: second, .. } = wait(&other, &key, &later) else {
        panic!("the second place is granted next");
    };
    assert!(other.release(&second.lock_id).unwrap());
    assert_eq!(stored_places(&backend, &key, "lock"), []);
}
