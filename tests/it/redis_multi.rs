//! Several keys at once on Redis (issue 35): a set is one script on one server (and behind
//! Sentinel, whose contracts run in `redis_sentinel.rs`) and on a Cluster when every key lies
//! in one hash slot; a Cluster set over several slots is taken key by key, still all or none as
//! the caller sees it; a set's lost answer leaves every lease in doubt, and the `Locker` frees
//! them all. And the ticket a waiter of several keys carries (`Line::WaitAt`) on one key's line.
//! The multi and line contracts run in `redis.rs`, `redis_cluster.rs` and `redis_sentinel.rs`.

use std::time::{Duration, Instant};

use redis::Commands as _;
use syncguard::driver::{
    Acquisition, Acquisitions, Driver, DriverExt, Key, KeySet, LeaseKind, LeaseRef, Line, LockId,
    Request, Ttl,
};
use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{LockBackend, Locker};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::redis_topology::connection;
use crate::support::{
    TTL, impatient_redis, lease, redis_now_ms, shared_cluster, shared_redis,
    shared_redis_namespace, shared_redis_with_connection, unique,
};

fn ttl() -> Ttl {
    Ttl::new(TTL).unwrap()
}

/// One attempt on `key`'s lock through the driver.
fn attempt(backend: &RedisBackend, key: &str, line: Line<'_>) -> Acquisition {
    let key = Key::new(key).unwrap();
    backend
        .acquire_one(&Request::one(&key, ttl()).line(line))
        .unwrap()
}

/// One attempt on the set `keys` through the driver.
fn attempt_all(backend: &RedisBackend, keys: &[String], line: Line<'_>) -> Acquisitions {
    let keys = KeySet::new(keys).unwrap();
    Driver::try_acquire(backend, &Request::all(&keys, ttl()).line(line)).unwrap()
}

/// The lock on each of `keys`, taken one by one by `holder`.
fn hold_each(holder: &RedisBackend, keys: &[String]) -> Vec<syncguard::Lease> {
    (keys.iter())
        .map(|key| lease(holder.acquire(key, TTL)))
        .collect()
}

/// Releases every lease of an acquired set (in the set's order, which is `keys` sorted).
fn release_all(backend: &RedisBackend, keys: &[String], acquired: Acquisitions) {
    let Acquisitions::Acquired(leases) = acquired else {
        panic!("expected the set acquired, got {acquired:?}");
    };
    let set = KeySet::new(keys).unwrap();
    assert_eq!(leases.len(), set.len());
    for (key, (lease, _)) in set.iter().zip(leases) {
        let lock_id = LockId::new(&lease.lock_id).unwrap();
        let released = backend
            .release_lease(LeaseRef::new(&lock_id).with_key(key))
            .unwrap();
        assert!(released.is_applied(), "{key:?}");
    }
}

/// `(place id, ticket)` of the stored line of `key`'s lock, in line order.
fn stored_order(
    conn: &mut redis::Connection,
    backend: &RedisBackend,
    key: &str,
) -> Vec<(String, i64)> {
    let keys = backend.line_keys(key, LeaseKind::Lock).unwrap();
    conn.zrange_withscores(&keys.order, 0, -1).unwrap()
}

/// A place id that sorts before or after others by its first character (the byte order a
/// sorted set uses: every uppercase letter before every lowercase one, which a locale's
/// collation does not keep).
fn place_id(first: char) -> LockId {
    LockId::new(&format!("{first}{}", "x".repeat(21))).unwrap()
}

// ---------------------------------------------------------------------------------------------
// One key's line: the ticket a waiter of several keys carries
// ---------------------------------------------------------------------------------------------

/// `Line::WaitAt(P, T)`: a new place gets ticket T (not the line's next), the line's last
/// ticket grows to T so that a later waiter comes after it, and it is served in ticket order.
#[test]
fn a_carried_ticket_places_the_waiter_by_it() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("multi-carried-ticket");
    let held = lease(backend.acquire(&key, TTL));
    let (first, carried, later) = (LockId::generate(), LockId::generate(), LockId::generate());

    assert_eq!(
        attempt(&backend, &key, Line::Wait(&first)),
        Acquisition::Locked
    );
    assert_eq!(
        attempt(&backend, &key, Line::WaitAt(&carried, 5)),
        Acquisition::Locked
    );
    assert_eq!(
        attempt(&backend, &key, Line::Wait(&later)),
        Acquisition::Locked
    );
    assert_eq!(
        stored_order(&mut conn, &backend, &key),
        [
            (first.as_str().to_owned(), 1),
            (carried.as_str().to_owned(), 5),
            (later.as_str().to_owned(), 6),
        ]
    );
    let found: Vec<(String, u64)> = backend
        .find_line(&Key::new(&key).unwrap(), LeaseKind::Lock)
        .unwrap()
        .into_iter()
        .map(|place| (place.place_id, place.ticket))
        .collect();
    assert_eq!(
        found,
        [
            (first.as_str().to_owned(), 1),
            (carried.as_str().to_owned(), 5),
            (later.as_str().to_owned(), 6),
        ]
    );

    assert!(backend.release(&held.lock_id).unwrap());
    assert_eq!(
        attempt(&backend, &key, Line::WaitAt(&carried, 5)),
        Acquisition::Locked,
        "the first place is ahead"
    );
    for (place, line) in [
        (&first, Line::Wait(&first)),
        (&carried, Line::WaitAt(&carried, 5)),
        (&later, Line::Wait(&later)),
    ] {
        let Acquisition::Acquired { lease, .. } = attempt(&backend, &key, line) else {
            panic!("{place:?} is next in line");
        };
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    assert_eq!(stored_order(&mut conn, &backend, &key), []);
}

/// Two waiters carrying one ticket are ordered by place id in byte order, whichever came
/// first; a carried ticket below the line's last one does not lower it.
#[test]
fn equal_tickets_are_ordered_by_place_id_bytes() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("multi-tied-ticket");
    let held = lease(backend.acquire(&key, TTL));
    let (upper, lower) = (place_id('B'), place_id('a'));
    assert_eq!(
        attempt(&backend, &key, Line::WaitAt(&lower, 3)),
        Acquisition::Locked
    );
    assert_eq!(
        attempt(&backend, &key, Line::WaitAt(&upper, 3)),
        Acquisition::Locked
    );
    assert_eq!(
        stored_order(&mut conn, &backend, &key),
        [
            (upper.as_str().to_owned(), 3),
            (lower.as_str().to_owned(), 3)
        ]
    );
    let newcomer = LockId::generate();
    assert_eq!(
        attempt(&backend, &key, Line::Wait(&newcomer)),
        Acquisition::Locked
    );
    assert_eq!(stored_order(&mut conn, &backend, &key)[2].1, 4);

    assert!(backend.release(&held.lock_id).unwrap());
    assert_eq!(
        attempt(&backend, &key, Line::WaitAt(&lower, 3)),
        Acquisition::Locked,
        "the same ticket and a smaller place id is ahead"
    );
    for line in [
        Line::WaitAt(&upper, 3),
        Line::WaitAt(&lower, 3),
        Line::Wait(&newcomer),
    ] {
        let Acquisition::Acquired { lease, .. } = attempt(&backend, &key, line) else {
            panic!("{line:?} is next in line");
        };
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}

/// A waiter that stands in line is judged where it stands, whatever ticket it carries (issue
/// 40, item 1): a lower ticket does not put it ahead of those before it, a higher one does not
/// put those behind it ahead of it.
#[test]
fn a_waiter_is_judged_where_it_stands_whatever_ticket_it_carries() {
    let backend = crate::support::shared_redis_backend();
    let key = unique("multi-judged-where-it-stands");
    let held = lease(backend.acquire(&key, TTL));
    let (first, second) = (LockId::generate(), LockId::generate());
    for place in [&first, &second] {
        assert_eq!(
            attempt(&backend, &key, Line::Wait(place)),
            Acquisition::Locked
        );
    }
    assert!(backend.release(&held.lock_id).unwrap());
    assert_eq!(
        attempt(&backend, &key, Line::WaitAt(&second, 0)),
        Acquisition::Locked,
        "the first place is ahead of the second's"
    );
    for line in [Line::WaitAt(&first, 9), Line::Wait(&second)] {
        let Acquisition::Acquired { lease, .. } = attempt(&backend, &key, line) else {
            panic!("{line:?} is first in line");
        };
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// Counting the scripts a set costs
// ---------------------------------------------------------------------------------------------

/// How many scripts (`EVAL`/`EVALSHA`) naming `needle` the server on `port` ran while `action`
/// ran, read with `MONITOR` (so other tests' calls on the shared server do not count): the
/// end is a marker command sent after `action`, awaited in the monitor's stream.
fn scripts_seen<T>(port: u16, needle: &str, action: impl FnOnce() -> T) -> (usize, T) {
    let mut monitor = connection(port).unwrap();
    let _: () = redis::cmd("MONITOR").query(&mut monitor).unwrap();
    let answer = action();
    let marker = unique("monitor-end");
    let mut other = connection(port).unwrap();
    let _: String = redis::cmd("ECHO").arg(&marker).query(&mut other).unwrap();
    let mut scripts = 0;
    loop {
        let line = match monitor.recv_response().unwrap() {
            redis::Value::SimpleString(line) => line,
            redis::Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned(),
            _ => continue,
        };
        if line.contains(&marker) {
            break;
        }
        // `<time> [<db> <client>] "<COMMAND>" "<arg>" …`; a script's own calls show `lua`
        // as their client.
        let command = line
            .split_once("] ")
            .map(|(_, rest)| rest.to_ascii_lowercase())
            .unwrap_or_default();
        if (command.starts_with("\"evalsha\"") || command.starts_with("\"eval\""))
            && line.contains(needle)
        {
            scripts += 1;
        }
    }
    (scripts, answer)
}

/// `count` keys starting with `base` whose locks, in the cluster layout under the default
/// prefix, lie in one hash slot (their tag is the key itself: CRC16 of the key).
fn keys_in_one_slot(base: &str, count: usize) -> Vec<String> {
    let slot = |key: &str| crc16(key.as_bytes()) % 16384;
    let first = format!("{base}-0");
    let target = slot(&first);
    let mut keys = vec![first];
    let mut n = 1u64;
    while keys.len() < count {
        let key = format!("{base}-{n}");
        if slot(&key) == target {
            keys.push(key);
        }
        n += 1;
    }
    keys
}

/// CRC16 (XMODEM), as Redis Cluster hashes keys.
fn crc16(bytes: &[u8]) -> u16 {
    let mut crc = 0u16;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// A set of 8 keys on one server is one script, in both layouts (the cluster layout's index
/// entries go beside it in the same round trip); refused, too.
#[test]
fn a_set_of_eight_keys_is_one_script() {
    let port = shared_redis().port;
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let (backend, prefix) = shared_redis_namespace(layout);
        let base = unique("multi-one-script");
        let keys: Vec<String> = (0..8).map(|n| format!("{base}-{n}")).collect();
        // The script is loaded before counting (a server that does not know it answers the
        // first call NOSCRIPT, and the call is made again).
        release_all(&backend, &keys, attempt_all(&backend, &keys, Line::Keep));

        let (scripts, acquired) =
            scripts_seen(port, &prefix, || attempt_all(&backend, &keys, Line::Keep));
        assert_eq!(scripts, 1, "{layout:?}");
        let Acquisitions::Acquired(leases) = &acquired else {
            panic!("{layout:?}: expected the set acquired, got {acquired:?}");
        };
        assert!(
            leases.iter().all(|(lease, _)| lease.fence.value() == 2),
            "{layout:?}"
        );
        for key in &keys {
            assert!(backend.is_locked(key).unwrap(), "{layout:?} {key}");
        }

        let (scripts, refused) =
            scripts_seen(port, &prefix, || attempt_all(&backend, &keys, Line::Keep));
        assert_eq!(scripts, 1, "{layout:?}");
        assert_eq!(
            refused,
            Acquisitions::Locked {
                ticket: None,
                position: None
            },
            "{layout:?}"
        );
        release_all(&backend, &keys, acquired);
    }
}

/// A set with one key held by a lock the TypeScript SyncGuard wrote (its record, field for
/// field, no holder) is refused, and no key of the set is taken; once it is gone, the set is.
#[test]
fn a_set_with_a_typescript_lock_is_refused() {
    let (backend, mut conn) = shared_redis_with_connection();
    let base = unique("multi-ts-held");
    let keys: Vec<String> = (0..4).map(|n| format!("{base}-{n}")).collect();
    let now = redis_now_ms(&mut conn);
    let lock_id = LockId::generate();
    let lock_key = backend.lock_key(&keys[2]).unwrap();
    let record = format!(
        r#"{{"lockId":"{}","expiresAtMs":{},"acquiredAtMs":{now},"key":"{}","fence":"000000000000001"}}"#,
        lock_id.as_str(),
        now + 60_000,
        keys[2]
    );
    let _: () = conn.set_ex(&lock_key, &record, 60).unwrap();
    let index_key = backend.index_key(lock_id.as_str()).unwrap();
    let _: () = conn.set_ex(&index_key, &lock_key, 60).unwrap();

    assert_eq!(
        attempt_all(&backend, &keys, Line::Keep),
        Acquisitions::Locked {
            ticket: None,
            position: None
        }
    );
    for (n, key) in keys.iter().enumerate() {
        assert_eq!(backend.is_locked(key).unwrap(), n == 2, "{key}");
        let fence: Option<String> = conn.get(backend.fence_key(key).unwrap()).unwrap();
        assert_eq!(fence, None, "no fence issued for {key}");
    }
    let place = LockId::generate();
    assert_eq!(
        attempt_all(&backend, &keys, Line::Wait(&place)),
        Acquisitions::Locked {
            ticket: Some(1),
            position: Some(0)
        },
        "a waiter stands in the TypeScript lock's line"
    );
    assert!(backend.release(lock_id.as_str()).unwrap());
    let acquired = attempt_all(&backend, &keys, Line::WaitAt(&place, 1));
    release_all(&backend, &keys, acquired);
    assert_eq!(stored_order(&mut conn, &backend, &keys[2]), []);
}

// ---------------------------------------------------------------------------------------------
// A Cluster
// ---------------------------------------------------------------------------------------------

fn cluster_backend() -> RedisBackend {
    RedisBackend::connect(&shared_cluster().url()).expect("connect to the test Cluster")
}

/// On a Cluster, a set whose keys share a hash slot is one script on that slot's primary.
#[test]
fn a_cluster_set_in_one_slot_is_one_script() {
    let cluster = shared_cluster();
    let backend = cluster_backend();
    let base = unique("multi-slot");
    let keys = keys_in_one_slot(&base, 8);
    let lock_keys: Vec<String> = keys.iter().map(|k| backend.lock_key(k).unwrap()).collect();
    let slot = cluster.key_slot(&lock_keys[0]);
    for lock_key in &lock_keys {
        assert_eq!(cluster.key_slot(lock_key), slot, "{lock_key}");
    }
    let port = cluster
        .primary_of(slot, cluster.nodes[0].port)
        .expect("a primary serves the slot");
    release_all(&backend, &keys, attempt_all(&backend, &keys, Line::Keep));

    let (scripts, acquired) =
        scripts_seen(port, &base, || attempt_all(&backend, &keys, Line::Keep));
    assert_eq!(scripts, 1);
    for key in &keys {
        assert!(backend.is_locked(key).unwrap(), "{key}");
    }
    let (scripts, refused) = scripts_seen(port, &base, || attempt_all(&backend, &keys, Line::Keep));
    assert_eq!(scripts, 1);
    assert_eq!(
        refused,
        Acquisitions::Locked {
            ticket: None,
            position: None
        }
    );
    release_all(&backend, &keys, acquired);
}

/// On a Cluster, a set over several slots is taken key by key, and is still all or none as
/// its caller sees it: refused while one key is held, with none of the others left held, and
/// a waiter's ticket stands on the held key's line; taken whole once that key is free.
#[test]
fn a_cluster_set_over_several_slots_is_all_or_none() {
    let backend = cluster_backend();
    let other = cluster_backend();
    let base = unique("multi-slots");
    let keys: Vec<String> = (0..6).map(|n| format!("{base}-{n}")).collect();
    let cluster = shared_cluster();
    let slots: std::collections::BTreeSet<u16> = keys
        .iter()
        .map(|key| cluster.key_slot(&backend.lock_key(key).unwrap()))
        .collect();
    assert!(slots.len() > 1, "the keys lie in several slots");
    let held = lease(other.acquire(&keys[3], TTL));

    assert_eq!(
        attempt_all(&backend, &keys, Line::Keep),
        Acquisitions::Locked {
            ticket: None,
            position: None
        }
    );
    let place = LockId::generate();
    let Acquisitions::Locked {
        ticket: Some(ticket),
        ..
    } = attempt_all(&backend, &keys, Line::Wait(&place))
    else {
        panic!("a waiter is refused with a ticket");
    };
    for (n, key) in keys.iter().enumerate() {
        assert_eq!(backend.is_locked(key).unwrap(), n == 3, "{key}");
    }
    let line: Vec<(String, u64)> = backend
        .find_line(&Key::new(&keys[3]).unwrap(), LeaseKind::Lock)
        .unwrap()
        .into_iter()
        .map(|place| (place.place_id, place.ticket))
        .collect();
    assert_eq!(line, [(place.as_str().to_owned(), ticket)]);

    assert!(other.release(&held.lock_id).unwrap());
    let acquired = attempt_all(&backend, &keys, Line::WaitAt(&place, ticket));
    for key in &keys {
        assert!(backend.is_locked(key).unwrap(), "{key}");
    }
    release_all(&backend, &keys, acquired);
}

// ---------------------------------------------------------------------------------------------
// A lost answer
// ---------------------------------------------------------------------------------------------

/// The places `(place id, ticket)` of the line of `key`'s lock, as the driver reads them.
fn places(backend: &RedisBackend, key: &str) -> Vec<(String, u64)> {
    backend
        .find_line(&Key::new(key).unwrap(), LeaseKind::Lock)
        .unwrap()
        .into_iter()
        .map(|place| (place.place_id, place.ticket))
        .collect()
}

/// `other` takes every one of `keys`; then the waiter `set` asks `backend` for them all and is
/// refused with a ticket. Answers `other`'s leases and the set's ticket.
#[track_caller]
fn held_and_a_refused_set(
    backend: &RedisBackend,
    other: &RedisBackend,
    keys: &[String],
    set: &LockId,
) -> (Vec<syncguard::Lease>, u64) {
    let held = hold_each(other, keys);
    let Acquisitions::Locked {
        ticket: Some(ticket),
        ..
    } = attempt_all(backend, keys, Line::Wait(set))
    else {
        panic!("a waiting set is refused with a ticket");
    };
    (held, ticket)
}

/// The waiter `single` is next on `key`: granted, and given back.
#[track_caller]
fn the_single_waiter_is_next(backend: &RedisBackend, key: &str, single: &LockId) {
    let Acquisition::Acquired { lease, .. } = attempt(backend, key, Line::Wait(single)) else {
        panic!("the single waiter is next");
    };
    assert!(backend.release(&lease.lock_id).unwrap());
}

/// Issue 40, item 1: a set's refused attempt is applied (it stands in line on both keys) and
/// its answer lost, so it asks again with `Line::Wait` and no ticket, after a single waiter
/// took its place behind it on one key. The retry finds the set's places and answers their
/// ticket, with no second place; once the keys are free the set is granted (its own places are
/// never ahead of it), then the single waiter.
fn a_set_retried_after_its_answer_was_lost_is_granted(
    backend: &RedisBackend,
    other: &RedisBackend,
    keys: &[String],
) {
    let [first_key, second_key] = keys else {
        panic!("two keys");
    };
    let (set, single) = (LockId::generate(), LockId::generate());
    let (held, ticket) = held_and_a_refused_set(backend, other, keys, &set);
    assert_eq!(
        attempt(backend, first_key, Line::Wait(&single)),
        Acquisition::Locked
    );
    // The first answer is lost: the same request again, without the ticket.
    let retried = attempt_all(backend, keys, Line::Wait(&set));
    assert_eq!(
        places(backend, first_key),
        [
            (set.as_str().to_owned(), ticket),
            (single.as_str().to_owned(), ticket + 1)
        ],
        "no second place"
    );
    assert_eq!(
        places(backend, second_key),
        [(set.as_str().to_owned(), ticket)]
    );

    for lease in held {
        assert!(other.release(&lease.lock_id).unwrap());
    }
    assert_eq!(
        attempt(backend, first_key, Line::Wait(&single)),
        Acquisition::Locked,
        "the set is ahead"
    );
    let granted = attempt_all(backend, keys, Line::Wait(&set));
    assert!(
        matches!(granted, Acquisitions::Acquired(_)),
        "the set is granted once its keys are free, got {granted:?}"
    );
    assert_eq!(
        retried,
        Acquisitions::Locked {
            ticket: Some(ticket),
            position: Some(0)
        },
        "the retry answers the set's one ticket"
    );
    release_all(backend, keys, granted);
    the_single_waiter_is_next(backend, first_key, &single);
    for key in keys {
        assert_eq!(places(backend, key), [], "{key}: no place left behind");
    }
}

#[test]
fn a_set_retried_after_a_lost_answer_is_granted_on_one_server() {
    let backend = crate::support::shared_redis_backend();
    let base = unique("multi-retried");
    let keys = vec![format!("{base}-a"), format!("{base}-b")];
    a_set_retried_after_its_answer_was_lost_is_granted(&backend, &backend, &keys);
}

#[test]
fn a_set_retried_after_a_lost_answer_is_granted_on_a_cluster_slot() {
    let (backend, other) = (cluster_backend(), cluster_backend());
    let keys = keys_in_one_slot(&unique("multi-retried-slot"), 2);
    a_set_retried_after_its_answer_was_lost_is_granted(&backend, &other, &keys);
}

#[test]
fn a_set_retried_after_a_lost_answer_is_granted_on_cluster_slots() {
    let (backend, other) = (cluster_backend(), cluster_backend());
    let keys = keys_in_two_slots(&unique("multi-retried-slots"));
    a_set_retried_after_its_answer_was_lost_is_granted(&backend, &other, &keys);
}

/// Two keys starting with `base`, in byte order, whose locks (cluster layout, default prefix)
/// lie in two hash slots.
fn keys_in_two_slots(base: &str) -> Vec<String> {
    let slot = |key: &str| crc16(key.as_bytes()) % 16384;
    let first = format!("{base}-0");
    let second = (1..)
        .map(|n| format!("{base}-{n}"))
        .find(|key| slot(key) != slot(&first))
        .expect("a key in another slot");
    let keys = vec![first, second];
    let cluster = shared_cluster();
    let backend = cluster_backend();
    let slots: Vec<u16> = keys
        .iter()
        .map(|key| cluster.key_slot(&backend.lock_key(key).unwrap()))
        .collect();
    assert_ne!(slots[0], slots[1], "the keys lie in two slots");
    keys
}

/// Issue 40, item 3: a set over two Cluster slots stands on both keys; the first comes free
/// while the second is held. Its next attempt keeps its place on the free key (it does not take
/// it and give it back, losing the place), so a single waiter arriving there is refused: the set
/// is ahead. Once the second key is free the set is granted, then the single waiter.
#[test]
fn a_cluster_set_over_several_slots_keeps_its_place_on_a_key_that_admits_it() {
    let (backend, other) = (cluster_backend(), cluster_backend());
    let keys = keys_in_two_slots(&unique("multi-slots-place"));
    let (set, single) = (LockId::generate(), LockId::generate());
    let (held, ticket) = held_and_a_refused_set(&backend, &other, &keys, &set);
    for key in &keys {
        assert_eq!(
            places(&backend, key),
            [(set.as_str().to_owned(), ticket)],
            "{key}"
        );
    }
    assert!(other.release(&held[0].lock_id).unwrap());
    assert_eq!(
        attempt_all(&backend, &keys, Line::WaitAt(&set, ticket)),
        Acquisitions::Locked {
            ticket: Some(ticket),
            position: Some(0)
        }
    );
    assert_eq!(
        places(&backend, &keys[0]),
        [(set.as_str().to_owned(), ticket)],
        "the set keeps its place on the free key"
    );
    assert!(!backend.is_locked(&keys[0]).unwrap());
    assert_eq!(
        attempt(&backend, &keys[0], Line::Wait(&single)),
        Acquisition::Locked,
        "the set is ahead of the single waiter"
    );

    assert!(other.release(&held[1].lock_id).unwrap());
    let granted = attempt_all(&backend, &keys, Line::WaitAt(&set, ticket));
    release_all(&backend, &keys, granted);
    the_single_waiter_is_next(&backend, &keys[0], &single);
    for key in &keys {
        assert_eq!(places(&backend, key), [], "{key}: no place left behind");
    }
}

/// The set's script reaches the server and its connection is closed as the answer comes back:
/// the pool sends it once more on a fresh connection, with the same lock ids, and the script
/// answers the same leases again (each key's first fence, not a second one), holding nothing
/// twice and leaving no waiter's place behind.
#[test]
fn a_set_repeated_after_its_answer_was_lost_is_the_same_set() {
    let server = shared_redis();
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into());
    let backend = impatient_redis(&format!("redis://127.0.0.1:{}/", proxy.port()))
        .pool_size(1)
        .build()
        .expect("connect through the proxy");
    let base = unique("multi-repeat");
    let keys: Vec<String> = (0..8).map(|n| format!("{base}-{n}")).collect();
    // The script is known to the server and the pool's connection open before the cut.
    let warm: Vec<String> = (0..2).map(|n| format!("{base}-warm-{n}")).collect();
    release_all(&backend, &warm, attempt_all(&backend, &warm, Line::Keep));
    let cuts = proxy.answers_cut();
    proxy.cut_answer_to(format!("{base}-0").as_bytes());
    let place = LockId::generate();
    let acquired = attempt_all(&backend, &keys, Line::Wait(&place));
    assert_eq!(proxy.answers_cut(), cuts + 1, "an answer was lost");
    let Acquisitions::Acquired(leases) = &acquired else {
        panic!("expected the set acquired, got {acquired:?}");
    };
    for (lease, _) in leases {
        assert_eq!(lease.fence.value(), 1, "the first grant, answered again");
    }
    let mut conn = server.connection();
    for key in &keys {
        assert!(backend.is_locked(key).unwrap(), "{key}");
        let fence: Option<i64> = conn.get(backend.fence_key(key).unwrap()).unwrap();
        assert_eq!(fence, Some(1), "{key}: one fence issued");
        assert_eq!(stored_order(&mut conn, &backend, key), []);
    }
    release_all(&backend, &keys, acquired);
}

/// The set's script reaches the server and its answer is lost (the proxy drops every reply,
/// so the read times out and nothing is sent again): the error is in doubt for every key with
/// its own lock id, and the `Locker` releases every one of them in the background once the
/// server answers again.
#[test]
fn a_lost_answer_leaves_every_key_in_doubt_and_all_are_freed() {
    let server = shared_redis();
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into());
    let backend = impatient_redis(&format!("redis://127.0.0.1:{}/", proxy.port()))
        .read_timeout(Duration::from_secs(1))
        .build()
        .expect("connect through the proxy");
    let base = unique("multi-lost");
    let keys: Vec<String> = (0..8).map(|n| format!("{base}-{n}")).collect();
    let locker = Locker::new(backend);
    // The pool's connection is open, and the server knows the script, before the answers go
    // missing (a NOSCRIPT answer lost would leave nothing applied).
    let warm = [unique("multi-lost-warm"), unique("multi-lost-warm")];
    locker
        .try_lock_all(&warm)
        .unwrap()
        .expect("free keys")
        .release()
        .unwrap();

    proxy.set_mode(Mode::DropReplies);
    let error = locker.try_lock_all(&keys).expect_err("no answer came back");
    proxy.set_mode(Mode::Pass);
    assert!(error.is_in_doubt(), "{error:?}");
    let in_doubt = error.in_doubt_leases();
    let named: Vec<Option<String>> = in_doubt
        .iter()
        .map(|(key, _)| key.map(str::to_owned))
        .collect();
    let expected: Vec<Option<String>> = KeySet::new(&keys)
        .unwrap()
        .iter()
        .map(|key| Some(key.as_str().to_owned()))
        .collect();
    assert_eq!(named, expected, "every key, in the set's order");
    let mut lock_ids: Vec<&str> = in_doubt.iter().map(|(_, id)| *id).collect();
    lock_ids.sort_unstable();
    lock_ids.dedup();
    assert_eq!(lock_ids.len(), keys.len(), "a lock id per key");

    // The script was applied (every key got its first fence) and every lock is released by
    // the Locker's background thread: awaited, with a hang guard.
    let direct = crate::support::shared_redis_backend();
    let mut conn = server.connection();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let applied = keys.iter().all(|key| {
            let fence: Option<i64> = conn.get(direct.fence_key(key).unwrap()).unwrap();
            fence == Some(1)
        });
        let freed = keys.iter().all(|key| !direct.is_locked(key).unwrap());
        if applied && freed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "every key taken and freed (applied {applied}, freed {freed})"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Three sets waiting for the same two held keys are told 0, 1 and 2 places ahead (the most
/// over the keys' lines), and once the first leaves both lines the others 0 and 1 (issue 41).
fn waiting_sets_are_told_how_many_stand_ahead(backend: &RedisBackend, keys: &[String]) {
    let held = hold_each(backend, keys);
    let sets: Vec<LockId> = (0..3).map(|_| LockId::generate()).collect();
    let positions = |sets: &[LockId]| -> Vec<Option<u64>> {
        (sets.iter())
            .map(|set| match attempt_all(backend, keys, Line::Wait(set)) {
                Acquisitions::Locked { position, .. } => position,
                granted => panic!("a set on held keys granted: {granted:?}"),
            })
            .collect()
    };
    assert_eq!(positions(&sets), [Some(0), Some(1), Some(2)]);
    for key in keys {
        backend
            .leave_line(&Key::new(key).unwrap(), LeaseKind::Lock, &sets[0])
            .unwrap();
    }
    assert_eq!(positions(&sets[1..]), [Some(0), Some(1)]);
    for lease in held {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}

#[test]
fn waiting_sets_are_told_their_place_on_one_server() {
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let (backend, _) = shared_redis_namespace(layout);
        let base = unique("multi-position");
        let keys = [format!("{base}-a"), format!("{base}-b")];
        waiting_sets_are_told_how_many_stand_ahead(&backend, &keys);
    }
}

#[test]
fn waiting_sets_are_told_their_place_over_several_cluster_slots() {
    let keys = keys_in_two_slots(&unique("multi-slots-position"));
    waiting_sets_are_told_how_many_stand_ahead(&cluster_backend(), &keys);
}
