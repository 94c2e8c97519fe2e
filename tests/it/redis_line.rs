//! The line of waiters as Redis stores it (issue 33): three keys per line in the lock's hash
//! slot, decided and written by the acquire script, every expired place pruned, nothing
//! written for an acquisition that finds no one in line, and keys of another type refused.
//! The line contracts themselves run in `redis.rs`, `redis_cluster.rs` and `redis_sentinel.rs`.

use std::collections::HashMap;

use redis::Commands as _;
use syncguard::driver::{
    Acquisition, Acquisitions, Driver, DriverExt, Holder, Key, LeaseKind, Line, LockId, Mode,
    Request, Ttl,
};
use syncguard::redis::{LineKeys, RedisBackend};
use syncguard::{ErrorCode, LockBackend};

use crate::support::{TTL, lease, redis_now_ms, shared_redis_with_connection, unique};

/// One attempt on `key`'s lock through the driver, as a waiter's (or a single attempt's).
fn attempt(
    backend: &RedisBackend,
    key: &str,
    holder: Option<&str>,
    line: Line<'_>,
) -> syncguard::Result<Acquisition> {
    let holder = holder.map(|holder| Holder::new(holder).unwrap());
    let ttl = Ttl::new(TTL).unwrap();
    let key = Key::new(key).unwrap();
    let request = Request::one(&key, ttl).holder(holder.as_ref()).line(line);
    backend.acquire_one(&request)
}

/// One attempt on `key`'s semaphore of one permit through the driver.
fn attempt_permit(backend: &RedisBackend, key: &str, line: Line<'_>) -> Acquisition {
    let ttl = Ttl::new(TTL).unwrap();
    let permits = syncguard::driver::Permits::new(1).unwrap();
    let key = Key::new(key).unwrap();
    let request = Request::one(&key, ttl)
        .mode(Mode::Permit(permits))
        .line(line);
    backend.acquire_one(&request).unwrap()
}

fn order(conn: &mut redis::Connection, keys: &LineKeys) -> Vec<(String, i64)> {
    conn.zrange_withscores(&keys.order, 0, -1).unwrap()
}

fn stored(conn: &mut redis::Connection, keys: &LineKeys) -> bool {
    let found: i64 = redis::cmd("EXISTS")
        .arg(&keys.order)
        .arg(&keys.expiry)
        .arg(&keys.places)
        .query(conn)
        .unwrap();
    found > 0
}

/// A waiter's place: its id in the order scored by its ticket, in the expiries scored by Redis
/// `TIME` + 5 s, its holder text in the places hash beside the last ticket issued; every key
/// with a TTL of its own, a little longer than a place's. The driver reads the same line back.
#[test]
fn a_place_is_stored_with_its_ticket_expiry_and_holder() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("line-storage");
    let held = lease(backend.acquire(&key, TTL));
    let keys = backend.line_keys(&key, LeaseKind::Lock).unwrap();
    let (first, second) = (LockId::generate(), LockId::generate());

    let before = redis_now_ms(&mut conn);
    let answer = attempt(&backend, &key, Some("waiter one"), Line::Wait(&first)).unwrap();
    let after = redis_now_ms(&mut conn);
    assert_eq!(answer, Acquisition::Locked);
    let answer = attempt(&backend, &key, None, Line::Wait(&second)).unwrap();
    assert_eq!(answer, Acquisition::Locked);

    assert_eq!(
        order(&mut conn, &keys),
        [
            (first.as_str().to_owned(), 1),
            (second.as_str().to_owned(), 2)
        ]
    );
    let expires: i64 = conn.zscore(&keys.expiry, first.as_str()).unwrap();
    assert!(
        (before + 5_000..=after + 5_000).contains(&expires),
        "{before} {expires} {after}"
    );
    let places: HashMap<String, String> = conn.hgetall(&keys.places).unwrap();
    assert_eq!(places.len(), 3, "{places:?}");
    assert_eq!(places[first.as_str()], "waiter one");
    assert_eq!(places[second.as_str()], "");
    assert_eq!(places["ticket"], "2");
    for name in [&keys.order, &keys.expiry, &keys.places] {
        let ttl: i64 = conn.pttl(name).unwrap();
        assert!((1..=7_000).contains(&ttl), "{name}: PTTL {ttl}");
    }

    let line = backend.waiters(&key, LeaseKind::Lock).unwrap();
    assert_eq!(line.len(), 2);
    let raw = Driver::find_line(&backend, &Key::new(&key).unwrap(), LeaseKind::Lock).unwrap();
    assert_eq!(raw[0].place_id, first.as_str());
    assert_eq!((raw[0].ticket, raw[0].expires_at_ms), (1, expires));
    assert_eq!(raw[0].holder.as_deref(), Some("waiter one"));
    assert_eq!((raw[1].ticket, raw[1].holder.as_deref()), (2, None));

    for place in [&first, &second] {
        Driver::leave_line(&backend, &Key::new(&key).unwrap(), LeaseKind::Lock, place).unwrap();
    }
    assert!(order(&mut conn, &keys).is_empty());
    assert!(backend.release(&held.lock_id).unwrap());
}

/// An acquisition that finds the key free and no one in line, waiting or not, lock or permit,
/// writes no key of the line; nor does a single attempt on a held key.
#[test]
fn no_one_in_line_means_no_line_key_written() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("line-untouched");
    let place = LockId::generate();
    let Acquisition::Acquired { lease: granted, .. } =
        attempt(&backend, &key, None, Line::Wait(&place)).unwrap()
    else {
        panic!("a free key is granted");
    };
    assert_eq!(
        attempt(&backend, &key, None, Line::Keep).unwrap(),
        Acquisition::Locked
    );
    assert!(!stored(
        &mut conn,
        &backend.line_keys(&key, LeaseKind::Lock).unwrap()
    ));
    assert!(backend.release(&granted.lock_id).unwrap());

    let Acquisition::Acquired { lease: permit, .. } =
        attempt_permit(&backend, &key, Line::Wait(&place))
    else {
        panic!("a free permit is granted");
    };
    assert_eq!(
        attempt_permit(&backend, &key, Line::Keep),
        Acquisition::Locked
    );
    assert!(!stored(
        &mut conn,
        &backend.line_keys(&key, LeaseKind::Permit).unwrap()
    ));
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &permit.lock_id)
            .unwrap()
    );
}

/// Expired places anywhere in the line — not only the first — are pruned by the next attempt,
/// and do not count as ahead of anyone: the live places keep their order and tickets, and a
/// newcomer takes the next ticket behind them.
#[test]
fn every_expired_place_is_pruned() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("line-prune");
    let keys = backend.line_keys(&key, LeaseKind::Lock).unwrap();
    let ids: Vec<LockId> = (0..4).map(|_| LockId::generate()).collect();
    let now = redis_now_ms(&mut conn);
    // Places 1 and 3 lapsed long ago (their waiters died); 2 and 4 are live.
    for (ticket, id) in (1..).zip(&ids) {
        let expires = if ticket % 2 == 1 {
            now - 60_000
        } else {
            now + 60_000
        };
        let _: () = conn.zadd(&keys.order, id.as_str(), ticket).unwrap();
        let _: () = conn.zadd(&keys.expiry, id.as_str(), expires).unwrap();
        let _: () = conn.hset(&keys.places, id.as_str(), "").unwrap();
    }
    let _: () = conn.hset(&keys.places, "ticket", 4).unwrap();
    for name in [&keys.order, &keys.expiry, &keys.places] {
        let _: () = conn.pexpire(name, 60_000).unwrap();
    }

    let newcomer = LockId::generate();
    assert_eq!(
        attempt(&backend, &key, None, Line::Wait(&newcomer)).unwrap(),
        Acquisition::Locked,
        "two live places are ahead of a newcomer on a free key"
    );
    let expected = [
        (ids[1].as_str().to_owned(), 2),
        (ids[3].as_str().to_owned(), 4),
        (newcomer.as_str().to_owned(), 5),
    ];
    assert_eq!(order(&mut conn, &keys), expected);
    let expiring: Vec<String> = conn.zrange(&keys.expiry, 0, -1).unwrap();
    assert_eq!(expiring.len(), 3, "{expiring:?}");
    let fields: Vec<String> = conn.hkeys(&keys.places).unwrap();
    assert_eq!(fields.len(), 4, "three places and the ticket: {fields:?}");

    // The first live place is first: granted on the free key, and leaves the line.
    let Acquisition::Acquired { lease: granted, .. } =
        attempt(&backend, &key, None, Line::Wait(&ids[1])).unwrap()
    else {
        panic!("the first live place is granted");
    };
    assert_eq!(order(&mut conn, &keys), expected[1..]);
    assert!(backend.release(&granted.lock_id).unwrap());
    let _: () = conn
        .del(&[&keys.order, &keys.expiry, &keys.places])
        .unwrap();
}

/// A key of the line that holds another Redis type is refused (`Internal`, naming it) by every
/// acquisition, the line's reading and leaving, before anything is written.
#[test]
fn a_line_key_of_another_type_is_refused() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("line-foreign");
    let keys = backend.line_keys(&key, LeaseKind::Lock).unwrap();
    let _: () = conn.set(&keys.order, "not a line").unwrap();

    let place = LockId::generate();
    for line in [Line::Ignore, Line::Keep, Line::Wait(&place)] {
        let error = attempt(&backend, &key, None, line).unwrap_err();
        assert_eq!(error.code(), ErrorCode::Internal, "{error}");
        assert!(error.message().contains(&keys.order), "{error}");
    }
    assert!(!backend.is_locked(&key).unwrap(), "nothing was written");
    let raw_key = Key::new(&key).unwrap();
    let error = Driver::find_line(&backend, &raw_key, LeaseKind::Lock).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    let error = Driver::leave_line(&backend, &raw_key, LeaseKind::Lock, &place).unwrap_err();
    assert_eq!(error.code(), ErrorCode::Internal, "{error}");
    let kept: String = conn.get(&keys.order).unwrap();
    assert_eq!(kept, "not a line");
    let _: () = conn.del(&keys.order).unwrap();
}

/// What a refused attempt on `key` in `mode` is told of its place in line (issue 41).
fn position_of(backend: &RedisBackend, key: &Key, mode: Mode, line: Line<'_>) -> Option<u64> {
    let request = Request::one(key, Ttl::new(TTL).unwrap())
        .mode(mode)
        .line(line);
    match Driver::try_acquire(backend, &request).unwrap() {
        Acquisitions::Locked { ticket, position } => {
            assert_eq!(ticket, None, "one key needs no ticket");
            position
        }
        granted => panic!("{mode:?} on a held key granted: {granted:?}"),
    }
}

/// A refused waiter is told how many live places stand ahead of its own, counted by the
/// acquire script once the line is written (issue 41): three waiters in line are 0, 1 and 2
/// (and stay so when they ask again); once the first leaves, the others are 0 and 1; an
/// attempt that takes no place is told none. For the lock, a semaphore and a shared hold.
#[test]
fn a_refused_waiter_is_told_how_many_stand_ahead_of_it() {
    let (backend, _conn) = shared_redis_with_connection();
    let one_permit = Mode::Permit(syncguard::driver::Permits::new(1).unwrap());
    for mode in [Mode::Exclusive, one_permit, Mode::Shared] {
        let key = Key::new(&unique("line-position")).unwrap();
        // A shared waiter waits for the exclusive lock to go; the others for their own kind.
        let held = if mode == Mode::Shared {
            Mode::Exclusive
        } else {
            mode
        };
        let ttl = Ttl::new(TTL).unwrap();
        let granted = Driver::try_acquire(&backend, &Request::one(&key, ttl).mode(held));
        assert!(
            matches!(granted, Ok(Acquisitions::Acquired(_))),
            "{granted:?}"
        );
        let waiters: Vec<LockId> = (0..3).map(|_| LockId::generate()).collect();
        let positions = |waiters: &[LockId]| -> Vec<Option<u64>> {
            (waiters.iter())
                .map(|place| position_of(&backend, &key, mode, Line::Wait(place)))
                .collect()
        };
        assert_eq!(positions(&waiters), [Some(0), Some(1), Some(2)], "{mode:?}");
        assert_eq!(positions(&waiters), [Some(0), Some(1), Some(2)], "{mode:?}");
        backend
            .leave_line(&key, mode.kind().sequence(), &waiters[0])
            .unwrap();
        assert_eq!(positions(&waiters[1..]), [Some(0), Some(1)], "{mode:?}");
        assert_eq!(position_of(&backend, &key, mode, Line::Keep), None);
        assert_eq!(position_of(&backend, &key, mode, Line::Ignore), None);
    }
}
