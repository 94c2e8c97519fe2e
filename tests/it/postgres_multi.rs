//! Several keys at once on PostgreSQL (issue 35), looked at in its tables and its statistics:
//! a waiter's ticket carried to one key places it by that ticket (`Line::WaitAt`), places with
//! one ticket stand in place-id byte order, a set of eight keys is one statement, a refused
//! waiter stands with one ticket on every key that refused it (directly and through the shared
//! PgBouncer), a set on tables the TypeScript SyncGuard made works (one key at a time), and a
//! set whose answer is lost leaves every key in doubt, which the Locker frees in the
//! background; a set whose refusal was lost keeps its one ticket when it asks again, also where
//! it is newly refused, so it never deadlocks with a single waiter, and a waiter is judged where
//! it stands whatever ticket it carries (issue 40). (The multi and line contracts run in
//! `postgres.rs` and `pgbouncer.rs`.)

use std::time::{Duration, Instant};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::{
    self, TTL, create_typescript_tables, drop_tables, impatient_postgres, lease, patient_postgres,
    shared_postgres, shared_postgres_backend, shared_postgres_with_tables, unique,
};
use syncguard::driver::{
    Acquisition, Acquisitions, Driver, Find, Key, KeySet, LeaseKind, LeaseRef, Line, LockId,
    Outcome, Ttl, generate_lock_id,
};
use syncguard::postgres::{PostgresBackend, TableNames};
use syncguard::{LockBackend, LockOptions, Locker};

fn ttl() -> Ttl {
    Ttl::new(TTL).unwrap()
}

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

/// Waits (a minute at most) until `done`.
fn await_condition(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < give_up, "waited a minute for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The places of `key`'s lock line as the backend reads them: (place id, ticket), in line order.
fn line_of(backend: &PostgresBackend, key: &str) -> Vec<(String, u64)> {
    backend
        .find_line(&self::key(key), LeaseKind::Lock)
        .unwrap()
        .into_iter()
        .map(|place| (place.place_id, place.ticket))
        .collect()
}

/// The ticket of `place` in `key`'s lock line.
fn ticket_of(backend: &PostgresBackend, key: &str, place: &LockId) -> Option<u64> {
    line_of(backend, key)
        .into_iter()
        .find(|(id, _)| id == place.as_str())
        .map(|(_, ticket)| ticket)
}

/// A waiter that carries an earlier ticket (taken on another key, as a waiter of several keys
/// does) to a key whose line has a later waiter: its new place stands by its ticket, ahead of
/// that waiter, and once the key is free it is granted first.
#[test]
fn a_ticket_carried_places_a_new_place_by_it() {
    let backend = shared_postgres_backend();
    let (first_key, second_key) = (unique("wait-at-first"), unique("wait-at-second"));
    let first_held = lease(backend.acquire(&first_key, TTL));
    let early = LockId::generate();
    let refused = backend.try_acquire(&key(&first_key), ttl(), None, Line::Wait(&early));
    assert_eq!(refused.unwrap(), Acquisition::Locked);
    let ticket = ticket_of(&backend, &first_key, &early).expect("the early waiter's place");

    let second_held = lease(backend.acquire(&second_key, TTL));
    let late = LockId::generate();
    let late_try = || backend.try_acquire(&key(&second_key), ttl(), None, Line::Wait(&late));
    assert_eq!(late_try().unwrap(), Acquisition::Locked);
    let early_try =
        || backend.try_acquire(&key(&second_key), ttl(), None, Line::WaitAt(&early, ticket));
    assert_eq!(early_try().unwrap(), Acquisition::Locked);
    assert_eq!(
        line_of(&backend, &second_key),
        [
            (early.as_str().to_owned(), ticket),
            (
                late.as_str().to_owned(),
                ticket_of(&backend, &second_key, &late).unwrap()
            ),
        ],
        "the earlier ticket stands ahead"
    );

    assert!(backend.release(&second_held.lock_id).unwrap());
    assert_eq!(
        late_try().unwrap(),
        Acquisition::Locked,
        "not first in line"
    );
    let Acquisition::Acquired { lease: granted, .. } = early_try().unwrap() else {
        panic!("the earlier ticket is first in line once the key is free");
    };
    assert!(backend.release(&granted.lock_id).unwrap());
    let Acquisition::Acquired { lease: next, .. } = late_try().unwrap() else {
        panic!("then the later waiter");
    };
    assert!(backend.release(&next.lock_id).unwrap());
    backend
        .leave_line(&key(&first_key), LeaseKind::Lock, &early)
        .unwrap();
    assert!(backend.release(&first_held.lock_id).unwrap());
}

/// Two waiters carrying one ticket stand in the byte order of their place ids, whichever came
/// first, and are read back in that order.
#[test]
fn places_of_one_ticket_stand_in_place_id_order() {
    let backend = shared_postgres_backend();
    let name = unique("wait-at-tie");
    let held = lease(backend.acquire(&name, TTL));
    let (mut low, mut high) = (LockId::generate(), LockId::generate());
    if low.as_str() > high.as_str() {
        std::mem::swap(&mut low, &mut high);
    }
    let ticket = 1;
    for place in [&high, &low] {
        let refused = backend.try_acquire(&key(&name), ttl(), None, Line::WaitAt(place, ticket));
        assert_eq!(refused.unwrap(), Acquisition::Locked);
    }
    let ids: Vec<String> = line_of(&backend, &name)
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    assert_eq!(ids, [low.as_str(), high.as_str()]);
    assert!(backend.release(&held.lock_id).unwrap());
    let high_try = backend.try_acquire(&key(&name), ttl(), None, Line::WaitAt(&high, ticket));
    assert_eq!(
        high_try.unwrap(),
        Acquisition::Locked,
        "the lower place id goes first"
    );
    let low_try = backend.try_acquire(&key(&name), ttl(), None, Line::WaitAt(&low, ticket));
    let Acquisition::Acquired { lease: granted, .. } = low_try.unwrap() else {
        panic!("the lower place id is first in line");
    };
    assert!(backend.release(&granted.lock_id).unwrap());
    backend
        .leave_line(&key(&name), LeaseKind::Lock, &high)
        .unwrap();
}

/// A live reader (a shared hold) of one key refuses the set, which then holds none of its keys;
/// once the reader is gone the set is taken.
#[test]
fn a_live_reader_of_one_key_refuses_the_set() {
    let backend = shared_postgres_backend();
    let prefix = unique("set-reader");
    let [a, b] = ["a", "b"].map(|suffix| format!("{prefix}:{suffix}"));
    let keys = KeySet::new(&[&a, &b]).unwrap();
    let reader = backend.try_acquire_shared(&key(&b), ttl(), None, Line::Ignore);
    let Acquisition::Acquired { lease: reader, .. } = reader.unwrap() else {
        panic!("a free key takes a reader");
    };
    let refused = backend.try_acquire_all(&keys, ttl(), None, Line::Ignore);
    assert_eq!(refused.unwrap(), Acquisitions::Locked { ticket: None });
    assert!(
        !backend.is_locked(&a).unwrap(),
        "a refused set holds no key"
    );
    let reader_id = LockId::new(&reader.lock_id).unwrap();
    let b_key = key(&b);
    let gone = backend.release_lease(
        LeaseRef::new(&reader_id)
            .with_key(&b_key)
            .with_kind(LeaseKind::Shared),
    );
    assert_eq!(gone.unwrap(), Outcome::Applied(()));
    let taken = backend.try_acquire_all(&keys, ttl(), None, Line::Ignore);
    let Acquisitions::Acquired(leases) = taken.unwrap() else {
        panic!("the set is taken once the reader is gone");
    };
    for (held, _) in leases {
        assert!(backend.release(&held.lock_id).unwrap());
    }
}

/// A database of the test's own on the shared cluster, with the default tables: its name and
/// its URL. Its statistics count its own transactions only.
fn database_of_its_own() -> (String, String) {
    shared_postgres_with_tables();
    let name = format!(
        "sg_multi_{}",
        generate_lock_id().to_lowercase().replace('-', "_")
    );
    shared_postgres()
        .client()
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let url = shared_postgres()
        .url()
        .replace("/postgres", &format!("/{name}"));
    let setup = patient_postgres(&url).build().unwrap();
    setup.setup_schema().unwrap();
    drop(setup);
    (name, url)
}

/// The transactions committed in `database` so far, once no session is connected to it: a
/// session's counts reach the statistics before it leaves `pg_stat_activity`.
fn commits_once_idle(database: &str) -> i64 {
    let mut client = shared_postgres().client();
    await_condition("every session of the database has ended", || {
        let sessions: i64 = client
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = $1",
                &[&database],
            )
            .unwrap()
            .get(0);
        sessions == 0
    });
    client
        .query_one(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = $1",
            &[&database],
        )
        .unwrap()
        .get(0)
}

/// The transactions a fresh backend on `url` commits, from its first connection to its last,
/// doing `work`.
fn commits_of(database: &str, url: &str, work: impl FnOnce(&PostgresBackend)) -> i64 {
    let before = commits_once_idle(database);
    let backend = patient_postgres(url).pool_size(1).build().unwrap();
    work(&backend);
    drop(backend);
    commits_once_idle(database) - before
}

/// The fewest transactions `work` costs a fresh backend over three runs: whatever else commits
/// in the database meanwhile (autovacuum's first visits to a new one) only adds to a run.
fn fewest_commits(database: &str, url: &str, work: impl Fn(&PostgresBackend)) -> i64 {
    (0..3)
        .map(|_| commits_of(database, url, &work))
        .min()
        .unwrap_or(i64::MAX)
}

/// Taking eight keys costs the server as many transactions as taking one key does: the set is
/// one statement (one round trip, one transaction), counted in a database of the test's own.
#[test]
fn a_set_of_eight_keys_is_one_statement() {
    let (database, url) = database_of_its_own();
    let set = fewest_commits(&database, &url, |backend| {
        let names: Vec<String> = (0..8).map(|n| unique(&format!("eight-{n}"))).collect();
        let keys = KeySet::new(&names).unwrap();
        let taken = backend
            .try_acquire_all(&keys, ttl(), None, Line::Ignore)
            .unwrap();
        let Acquisitions::Acquired(leases) = taken else {
            panic!("eight free keys are taken");
        };
        assert_eq!(leases.len(), 8);
    });
    let one = fewest_commits(&database, &url, |backend| {
        let taken = backend.try_acquire(&key(&unique("one")), ttl(), None, Line::Ignore);
        assert!(matches!(taken.unwrap(), Acquisition::Acquired { .. }));
    });
    assert_eq!(set, one, "eight keys: {set} transactions; one key: {one}");
    shared_postgres()
        .client()
        .batch_execute(&format!("DROP DATABASE {database} WITH (FORCE)"))
        .unwrap();
}

support::postgres_both_ways!(
    connect: [
        a_refused_waiter_stands_with_one_ticket_on_every_key_held,
        a_set_whose_refusal_was_lost_keeps_its_one_ticket,
        a_set_retried_on_a_newly_held_key_does_not_deadlock_a_single_waiter,
    ],
);

/// Three keys `PREFIX:a`, `PREFIX:b` and `PREFIX:c` under a unique prefix, and their set.
fn three_keys(prefix: &str) -> ([String; 3], KeySet) {
    let prefix = unique(prefix);
    let names = ["a", "b", "c"].map(|suffix| format!("{prefix}:{suffix}"));
    let keys = KeySet::new(&[&names[0], &names[1], &names[2]]).unwrap();
    (names, keys)
}

/// The ticket the set `keys`, refused, answers the waiter at `line`.
#[track_caller]
fn refused_ticket(backend: &PostgresBackend, keys: &KeySet, line: Line) -> u64 {
    let refused = backend.try_acquire_all(keys, ttl(), None, line);
    let Acquisitions::Locked {
        ticket: Some(ticket),
    } = refused.unwrap()
    else {
        panic!("a refused waiter gets a ticket");
    };
    ticket
}

/// Takes the set `keys` of `names` for the waiter at `line`, which must be granted (`why` says
/// why), checks that it left every key's line, and releases it.
#[track_caller]
fn granted_out_of_every_line(
    backend: &PostgresBackend,
    keys: &KeySet,
    names: &[String],
    line: Line,
    why: &str,
) {
    let taken = backend.try_acquire_all(keys, ttl(), None, line);
    let Acquisitions::Acquired(leases) = taken.unwrap() else {
        panic!("{why}");
    };
    assert_eq!(leases.len(), names.len());
    let other = shared_postgres_backend();
    for name in names {
        assert_eq!(line_of(&other, name), [], "the granted set left the line");
    }
    for (held, _) in leases {
        assert!(backend.release(&held.lock_id).unwrap());
    }
}

/// A waiter for three keys, two of them held: refused, it holds none and stands with one
/// ticket on both held keys (none on the free one); asked again with that ticket, it keeps its
/// places; once both keys are free, it takes all three and leaves both lines.
fn a_refused_waiter_stands_with_one_ticket_on_every_key_held(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let other = shared_postgres_backend();
    let (names, keys) = three_keys("set-line");
    let [a, b, c] = &names;
    let (held_b, held_c) = (lease(other.acquire(b, TTL)), lease(other.acquire(c, TTL)));
    let place = LockId::generate();
    let ticket = refused_ticket(&backend, &keys, Line::Wait(&place));
    assert!(!other.is_locked(a).unwrap(), "a refused set holds no key");
    assert_eq!(ticket_of(&other, b, &place), Some(ticket));
    assert_eq!(ticket_of(&other, c, &place), Some(ticket));
    assert_eq!(line_of(&other, a), [], "no place on the free key");
    let again = backend.try_acquire_all(&keys, ttl(), None, Line::WaitAt(&place, ticket));
    assert_eq!(
        again.unwrap(),
        Acquisitions::Locked {
            ticket: Some(ticket)
        }
    );
    assert!(other.release(&held_b.lock_id).unwrap());
    assert!(other.release(&held_c.lock_id).unwrap());
    granted_out_of_every_line(
        &backend,
        &keys,
        &names,
        Line::WaitAt(&place, ticket),
        "first in line on both keys once they are free",
    );
}

/// Issue 40, item 1: a set refused on two keys of three (the third free) stands on both with
/// one ticket, and its answer is lost. Meanwhile the third key is taken. The set asks again as
/// the Locker's retry does, with `Line::Wait` and no ticket, and then once more, as a pool
/// repeats a call whose answer was lost: each time it finds its places and answers their
/// ticket, and where it is newly refused it stands with that same ticket (one place per key,
/// one ticket on every key). Once the keys are free it is granted and leaves every line.
fn a_set_whose_refusal_was_lost_keeps_its_one_ticket(connect: fn() -> PostgresBackend) {
    let backend = connect();
    let other = shared_postgres_backend();
    let (names, keys) = three_keys("set-lost-refusal");
    let [a, b, c] = &names;
    let (held_a, held_b) = (lease(other.acquire(a, TTL)), lease(other.acquire(b, TTL)));
    let place = LockId::generate();
    let ticket = refused_ticket(&backend, &keys, Line::Wait(&place));
    let held_c = lease(other.acquire(c, TTL));
    for attempt in ["the retry", "the pool's repeat"] {
        let again = backend.try_acquire_all(&keys, ttl(), None, Line::Wait(&place));
        assert_eq!(
            again.unwrap(),
            Acquisitions::Locked {
                ticket: Some(ticket)
            },
            "{attempt} answers the ticket of the set's places"
        );
        for name in [&a, &b, &c] {
            assert_eq!(
                line_of(&other, name),
                [(place.as_str().to_owned(), ticket)],
                "{attempt}: one place on {name}, with the one ticket"
            );
        }
    }
    for held in [held_a, held_b, held_c] {
        assert!(other.release(&held.lock_id).unwrap());
    }
    granted_out_of_every_line(
        &backend,
        &keys,
        &names,
        Line::Wait(&place),
        "first in line on every key once they are free",
    );
}

/// Issue 40, item 1, the deadlock: a set X of A and B stands on A only (B free), and its answer
/// is lost; a single waiter Y stands on A behind X; B is taken; X retries with `Line::Wait` and
/// no ticket, and then carries the ticket answered, as the Locker does. With a second ticket on
/// B, later than Y's, X would wait for Y on A while Y waits for X's first place: neither is
/// ever granted. With its one ticket, once A and B are free X is granted, then Y.
fn a_set_retried_on_a_newly_held_key_does_not_deadlock_a_single_waiter(
    connect: fn() -> PostgresBackend,
) {
    let backend = connect();
    let other = shared_postgres_backend();
    let prefix = unique("set-retry-deadlock");
    let [a, b] = ["a", "b"].map(|suffix| format!("{prefix}:{suffix}"));
    let keys = KeySet::new(&[&a, &b]).unwrap();
    let held_a = lease(other.acquire(&a, TTL));
    let (x, y) = (LockId::generate(), LockId::generate());
    let refused = backend.try_acquire_all(&keys, ttl(), None, Line::Wait(&x));
    assert!(
        matches!(refused.unwrap(), Acquisitions::Locked { ticket: Some(_) }),
        "X stands on A"
    );
    let y_try = || other.try_acquire(&key(&a), ttl(), None, Line::Wait(&y));
    assert_eq!(y_try().unwrap(), Acquisition::Locked, "Y stands behind X");
    let held_b = lease(other.acquire(&b, TTL));
    let retried = backend.try_acquire_all(&keys, ttl(), None, Line::Wait(&x));
    let Acquisitions::Locked {
        ticket: Some(ticket),
    } = retried.unwrap()
    else {
        panic!("X, refused again, keeps a ticket");
    };
    assert!(other.release(&held_a.lock_id).unwrap());
    assert!(other.release(&held_b.lock_id).unwrap());
    assert_eq!(
        y_try().unwrap(),
        Acquisition::Locked,
        "X is ahead of Y on A"
    );
    let x_try = backend.try_acquire_all(&keys, ttl(), None, Line::WaitAt(&x, ticket));
    let Acquisitions::Acquired(leases) = x_try.unwrap() else {
        panic!(
            "X is first in line on A and B once both are free (lines: A {:?}, B {:?}; X answered \
             ticket {ticket})",
            line_of(&other, &a),
            line_of(&other, &b)
        );
    };
    for (held, _) in leases {
        assert!(backend.release(&held.lock_id).unwrap());
    }
    let Acquisition::Acquired { lease: y_lease, .. } = y_try().unwrap() else {
        panic!("then Y");
    };
    assert!(other.release(&y_lease.lock_id).unwrap());
    assert_eq!(line_of(&other, &a), []);
    assert_eq!(line_of(&other, &b), []);
}

/// A waiter that stands in a key's line is judged where it stands, whatever ticket it carries:
/// its own place is never ahead of it, and a ticket carried from elsewhere moves it neither
/// forward nor back (issue 40, item 1, for one key).
#[test]
fn a_waiter_is_judged_where_it_stands_whatever_ticket_it_carries() {
    let backend = shared_postgres_backend();
    let name = unique("judged-where-it-stands");
    let held = lease(backend.acquire(&name, TTL));
    let (first, second) = (LockId::generate(), LockId::generate());
    for place in [&first, &second] {
        let refused = backend.try_acquire(&key(&name), ttl(), None, Line::Wait(place));
        assert_eq!(refused.unwrap(), Acquisition::Locked);
    }
    assert!(backend.release(&held.lock_id).unwrap());
    let second_try = backend.try_acquire(&key(&name), ttl(), None, Line::WaitAt(&second, 0));
    assert_eq!(
        second_try.unwrap(),
        Acquisition::Locked,
        "an early ticket carried does not pass the first place"
    );
    let first_try = backend.try_acquire(
        &key(&name),
        ttl(),
        None,
        Line::WaitAt(&first, u64::MAX >> 2),
    );
    let Acquisition::Acquired { lease: granted, .. } = first_try.unwrap() else {
        panic!("a late ticket carried does not put the first place behind the second");
    };
    assert!(backend.release(&granted.lock_id).unwrap());
    backend
        .leave_line(&key(&name), LeaseKind::Lock, &second)
        .unwrap();
}

/// On tables the TypeScript SyncGuard made (no server functions), a set is taken one key at a
/// time with the statements sent inline: all or none as the caller sees it, each key with its
/// fence; a set with a held key is refused and holds none.
#[test]
fn a_set_on_tables_the_typescript_library_made() {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let tables = TableNames::new(
        &format!("ms_locks_{suffix}"),
        &format!("ms_fences_{suffix}"),
    )
    .unwrap();
    create_typescript_tables(
        &mut shared_postgres().client(),
        tables.lock_table(),
        tables.fence_table(),
    );
    let backend = patient_postgres(&shared_postgres().url())
        .table_name(tables.lock_table())
        .fence_table_name(tables.fence_table())
        .build()
        .unwrap();
    let prefix = unique("ts-set");
    let [a, b, c] = ["a", "b", "c"].map(|suffix| format!("{prefix}:{suffix}"));
    let held = lease(backend.acquire(&b, TTL));
    let keys = KeySet::new(&[&a, &b, &c]).unwrap();
    let place = LockId::generate();
    let refused = backend.try_acquire_all(&keys, ttl(), None, Line::Wait(&place));
    assert!(matches!(refused.unwrap(), Acquisitions::Locked { .. }));
    assert!(!backend.is_locked(&a).unwrap() && !backend.is_locked(&c).unwrap());
    assert!(backend.release(&held.lock_id).unwrap());
    let taken = backend.try_acquire_all(&keys, ttl(), None, Line::Wait(&place));
    let Acquisitions::Acquired(leases) = taken.unwrap() else {
        panic!("three free keys are taken");
    };
    assert_eq!(leases.len(), 3);
    for name in [&a, &b, &c] {
        assert!(backend.is_locked(name).unwrap());
    }
    for (held, _) in leases {
        assert!(backend.release(&held.lock_id).unwrap());
    }
    drop_tables(&tables);
}

/// A set whose statement reaches the server and whose answer is lost (the proxy drops every
/// answer) fails in doubt of every key with the lock id sent for it, while the server holds
/// them all; the Locker releases each in the background once the server answers again.
#[test]
fn a_lost_answer_leaves_every_key_in_doubt_and_the_locker_frees_them() {
    let server = shared_postgres_with_tables();
    let proxy = FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], server.port)));
    let url = format!(
        "postgres://{}:{}@127.0.0.1:{}/postgres",
        support::PG_USER,
        support::PG_PASSWORD,
        proxy.port()
    );
    let backend = impatient_postgres(&url).pool_size(1).build().unwrap();
    let observer = shared_postgres_backend();
    let prefix = unique("set-doubt");
    let names: Vec<String> = (0..8).map(|n| format!("{prefix}:{n}")).collect();
    let keys = KeySet::new(&names).unwrap();

    // The driver: every (key, lock id) of the set in doubt.
    assert!(
        !backend.is_locked(&prefix).unwrap(),
        "opens the pool's connection"
    );
    proxy.set_mode(Mode::DropReplies);
    let lost = backend
        .try_acquire_all(&keys, ttl(), None, Line::Ignore)
        .unwrap_err();
    proxy.set_mode(Mode::Pass);
    assert!(lost.is_in_doubt(), "{lost:?}");
    let doubts = lost.in_doubt_leases();
    let named: Vec<Option<&str>> = doubts.iter().map(|(key, _)| *key).collect();
    let expected: Vec<Option<&str>> = names.iter().map(|name| Some(name.as_str())).collect();
    assert_eq!(named, expected);
    for (name, lock_id) in &doubts {
        let lock_id = LockId::new(lock_id).unwrap();
        let record = observer.find(Find::LockId(&lock_id)).unwrap();
        assert_eq!(
            record.map(|r| r.key).as_deref(),
            *name,
            "taken by the server"
        );
    }
    for (_, lock_id) in doubts {
        assert!(observer.release(lock_id).unwrap());
    }

    // The Locker: every key freed in the background, long before its TTL.
    let locker = Locker::new(backend);
    let options = LockOptions::default()
        .ttl(Duration::from_secs(600))
        .timeout(Duration::ZERO);
    // The first answer lost took the pool's connection with it: a new one, before the next.
    assert!(!locker.backend().is_locked(&prefix).unwrap());
    proxy.set_mode(Mode::DropReplies);
    let lost = locker.lock_all_with(&names, &options).unwrap_err();
    assert!(lost.is_in_doubt(), "{lost:?}");
    assert!(
        names.iter().all(|name| observer.is_locked(name).unwrap()),
        "the server took every key"
    );
    proxy.set_mode(Mode::Pass);
    await_condition("every key is released in the background", || {
        names.iter().all(|name| !observer.is_locked(name).unwrap())
    });
}
