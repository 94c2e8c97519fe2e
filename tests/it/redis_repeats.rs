//! Calls that the pool repeats after their answer was lost (issue 30): a script whose
//! connection dies mid-call is sent once more on a new connection, and the first attempt may
//! already have run. A proxy passes the request, drops the server's answer and then cuts the
//! connection; the repeat must answer what the first attempt did, and (with `min_replicas`)
//! write, so that the `WAIT` after it has the first attempt's writes to wait for.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use redis::Commands as _;
use syncguard::redis::RedisBackend;
use syncguard::testing::support::wait_until;
use syncguard::{ErrorCode, LeaseKind, LockBackend, Mode as LeaseMode};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::redis_topology::{Node, data_node_args, info};
use crate::support::{PATIENT, TTL, lease, patient_redis, shared_redis, unique};

/// A backend through `proxy` with a single pooled connection, opened before any fault (the
/// answers of its handshake must arrive), on a server that knows the permit scripts (a lost
/// `NOSCRIPT` answer would be no lost acquisition).
fn through(proxy: &FaultProxy, query: &str) -> Arc<RedisBackend> {
    let backend = patient_redis(&format!("redis://127.0.0.1:{}/{query}", proxy.port()))
        .pool_size(1)
        .build()
        .expect("a backend through the proxy");
    let key = unique("warm-up");
    let warm = lease(backend.acquire_as(&key, LeaseMode::permits(1).unwrap(), TTL));
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &warm.lock_id)
            .unwrap()
    );
    Arc::new(backend)
}

/// A call whose request reached the server and whose answer the proxy dropped; the call still
/// waits for it.
struct AnswerLost<T> {
    answer: mpsc::Receiver<T>,
}

impl<T: Send + 'static> AnswerLost<T> {
    /// Starts `call` with `proxy` dropping answers, and returns once an answer was dropped
    /// (so the server ran the request).
    fn start(proxy: &FaultProxy, call: impl FnOnce() -> T + Send + 'static) -> AnswerLost<T> {
        let dropped = proxy.faults();
        proxy.set_mode(Mode::DropReplies);
        let (tx, answer) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(call());
        });
        wait_until("the server's answer to be dropped", PATIENT, || {
            proxy.faults() > dropped
        });
        AnswerLost { answer }
    }

    /// Cuts the connection the answer was lost on, so that the pool repeats the call on a new
    /// one, and returns what the call answered in the end.
    fn repeat(self, proxy: &FaultProxy) -> T {
        let opened = proxy.connections();
        proxy.set_mode(Mode::Pass);
        assert_eq!(proxy.cut_all(), 1, "the one connection the call waits on");
        let answer = self
            .answer
            .recv_timeout(Duration::from_secs(60))
            .expect("the call answers after its connection was cut");
        assert_eq!(
            proxy.connections(),
            opened + 1,
            "the call was repeated on a new connection"
        );
        answer
    }
}

/// The records (permits, or shared holders) stored in the hash `permits_key`, by lock id.
fn permits(conn: &mut redis::Connection, permits_key: &str) -> HashMap<String, serde_json::Value> {
    let raw: HashMap<String, String> = conn.hgetall(permits_key).unwrap();
    raw.into_iter()
        .map(|(lock_id, record)| (lock_id, serde_json::from_str(&record).unwrap()))
        .collect()
}

/// The answer to a permit acquisition is lost and the acquisition repeated: the repeat answers
/// the permit the first attempt took (same lock id, same fence, granted), even though that
/// permit fills the semaphore; no second permit, no second fence.
#[test]
fn a_repeated_permit_acquisition_answers_the_first_permit() {
    let proxy = FaultProxy::start(([127, 0, 0, 1], shared_redis().port).into());
    let backend = through(&proxy, "");
    let key = unique("sem-repeat");
    let keys = backend.semaphore_keys(&key).unwrap();
    let acquire = {
        let (backend, key) = (Arc::clone(&backend), key.clone());
        move || backend.acquire_as(&key, LeaseMode::permits(1).unwrap(), TTL)
    };
    let repeated = lease(AnswerLost::start(&proxy, acquire).repeat(&proxy));

    let mut conn = shared_redis().connection();
    let stored = permits(&mut conn, &keys.permits);
    assert_eq!(stored.len(), 1, "one permit, not two: {stored:?}");
    let record = stored
        .get(&repeated.lock_id)
        .expect("the permit answered is the one stored");
    assert_eq!(record["fence"], repeated.fence.to_string());
    assert_eq!(record["expiresAtMs"], repeated.expires_at_ms);
    assert_eq!(repeated.fence.value(), 1);
    let counter: i64 = conn.get(&keys.fence).unwrap();
    assert_eq!(counter, 1, "the repeat took no fence of its own");
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &repeated.lock_id)
            .unwrap()
    );
}

/// The answer to a shared acquisition is lost and the acquisition repeated (issue 34): the
/// repeat answers the shared hold the first attempt took (same lock id, same fence), not a
/// second reader with a fence of its own.
#[test]
fn a_repeated_shared_acquisition_answers_the_first_hold() {
    let proxy = FaultProxy::start(([127, 0, 0, 1], shared_redis().port).into());
    let backend = through(&proxy, "");
    let key = unique("shared-repeat");
    // Taken through the proxy before any fault: the shared acquire script is then loaded.
    let warm = lease(backend.acquire_as(&key, LeaseMode::Shared, TTL));
    assert!(
        backend
            .release_as(&key, LeaseKind::Shared, &warm.lock_id)
            .unwrap()
    );
    let keys = backend.shared_keys(&key).unwrap();
    let acquire = {
        let (backend, key) = (Arc::clone(&backend), key.clone());
        move || backend.acquire_as(&key, LeaseMode::Shared, TTL)
    };
    let repeated = lease(AnswerLost::start(&proxy, acquire).repeat(&proxy));

    let mut conn = shared_redis().connection();
    let stored = permits(&mut conn, &keys.records);
    assert_eq!(stored.len(), 1, "one reader, not two: {stored:?}");
    let record = stored
        .get(&repeated.lock_id)
        .expect("the hold answered is the one stored");
    assert_eq!(record["fence"], repeated.fence.to_string());
    assert_eq!(repeated.fence.value(), 2, "the warm-up took fence 1");
    let counter: i64 = conn.get(backend.fence_key(&key).unwrap()).unwrap();
    assert_eq!(counter, 2, "the repeat took no fence of its own");
    assert!(
        backend
            .release_as(&key, LeaseKind::Shared, &repeated.lock_id)
            .unwrap()
    );
}

/// The answer to a waiter's attempt on a held lock is lost and the attempt repeated (issue 33):
/// the repeat finds the place the first attempt took, so the waiter has one place, with the
/// first attempt's ticket, and the line's counter issued one ticket.
#[test]
fn a_repeated_attempt_in_line_is_one_place() {
    use syncguard::driver::{
        Acquisition, Driver, DriverExt as _, Key, LeaseKind, Line, LockId, Request, Ttl,
    };

    let proxy = FaultProxy::start(([127, 0, 0, 1], shared_redis().port).into());
    let backend = through(&proxy, "");
    let key = unique("line-repeat");
    // Held through the proxy too, before any fault: the acquire script is then loaded.
    let held = lease(backend.acquire(&key, TTL));
    let place = LockId::generate();
    let attempt = {
        let (backend, key, place) = (Arc::clone(&backend), key.clone(), place.clone());
        move || {
            let key = Key::new(&key).unwrap();
            let ttl = Ttl::new(TTL).unwrap();
            backend.acquire_one(&Request::one(&key, ttl).line(Line::Wait(&place)))
        }
    };
    let answer = AnswerLost::start(&proxy, attempt).repeat(&proxy);
    assert_eq!(answer.unwrap(), Acquisition::Locked);

    let line = Driver::find_line(&*backend, &Key::new(&key).unwrap(), LeaseKind::Lock).unwrap();
    assert_eq!(line.len(), 1, "one place, not two: {line:?}");
    assert_eq!(line[0].place_id, place.as_str());
    assert_eq!(line[0].ticket, 1, "the first attempt's ticket");
    let keys = backend.line_keys(&key, LeaseKind::Lock).unwrap();
    let mut conn = shared_redis().connection();
    let issued: i64 = conn.hget(&keys.places, "ticket").unwrap();
    assert_eq!(issued, 1, "the repeat took no ticket of its own");

    Driver::leave_line(&*backend, &Key::new(&key).unwrap(), LeaseKind::Lock, &place).unwrap();
    assert!(backend.release(&held.lock_id).unwrap());
}

/// A primary, and a replica whose replication stream runs through a proxy (the link, which
/// can stall it), once the replica follows.
fn primary_and_replica() -> (Node, FaultProxy, Node) {
    let mut primary = Node::new("redis-primary", data_node_args);
    primary.start();
    let link = FaultProxy::start(([127, 0, 0, 1], primary.port).into());
    let mut replica = Node::replica_of(link.port());
    replica.start();
    replica.await_replica_link();
    (primary, link, replica)
}

/// How many writes the node on `port` applied (its replicated ones included): nothing saves in
/// these tests, so the count only grows.
fn writes_applied(port: u16) -> u64 {
    info(port, "persistence")
        .get("rdb_changes_since_last_save")
        .and_then(|n| n.parse().ok())
        .expect("INFO persistence counts the changes")
}

/// With `min_replicas=1`, a repeated permit acquisition writes (the permit's record, unchanged),
/// so the `WAIT` after it waits for a replica to have that write, and with it everything the
/// first attempt wrote. (Servers that record a connection's replication offset only after a
/// command that replicates, as the current Redis source does, would otherwise let the repeat's
/// fresh connection `WAIT` for nothing, and count a replica that lacks the permit.) With the
/// replication stream stalled, the repeat is refused and the permit undone.
#[test]
fn a_repeated_permit_acquisition_writes_what_wait_counts() {
    let (primary, link, replica) = primary_and_replica();
    let proxy = FaultProxy::start(([127, 0, 0, 1], primary.port).into());
    let backend = through(&proxy, "?min_replicas=1&replica_timeout=2000ms");
    let acquire = |key: &str| {
        let (backend, key) = (Arc::clone(&backend), key.to_owned());
        move || backend.acquire_as(&key, LeaseMode::permits(1).unwrap(), TTL)
    };

    // Replicating: the replica has the first attempt's permit before the repeat runs.
    let key = unique("sem-repeat-wait");
    let keys = backend.semaphore_keys(&key).unwrap();
    let pending = AnswerLost::start(&proxy, acquire(&key));
    let mut on_replica = replica.connection();
    wait_until(
        "the replica to have the first attempt's permit",
        PATIENT,
        || permits(&mut on_replica, &keys.permits).len() == 1,
    );
    let before = writes_applied(replica.port);
    let repeated = lease(pending.repeat(&proxy));
    let after = writes_applied(replica.port);
    assert!(
        after > before,
        "the repeat wrote, and its write reached the replica before WAIT answered \
         ({before} writes applied before the repeat, {after} after)"
    );
    let stored = permits(&mut primary.connection(), &keys.permits);
    assert_eq!(stored.len(), 1, "{stored:?}");
    assert!(stored.contains_key(&repeated.lock_id), "{stored:?}");
    assert_eq!(repeated.fence.value(), 1);

    // Stalled: no replica can acknowledge the repeat, so the acquisition is refused and its
    // permit released.
    link.set_mode(Mode::BlackHole);
    let key = unique("sem-repeat-stalled");
    let keys = backend.semaphore_keys(&key).unwrap();
    let err = AnswerLost::start(&proxy, acquire(&key))
        .repeat(&proxy)
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.message().contains("only 0 of the 1 replicas"), "{err}");
    assert!(
        permits(&mut primary.connection(), &keys.permits).is_empty(),
        "the refused permit was released"
    );
}
