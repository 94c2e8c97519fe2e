//! What a Redis backend does with what it finds in the store, and with calls that get no
//! answer, against a real `redis-server` (issue 22): a fence counter that is not a counter, a
//! lock key that holds no SyncGuard record, a key of another Redis type, a server that accepts
//! connections and never answers, and an acquisition whose answer was lost.

use std::time::Duration;

use redis::Commands as _;
use syncguard::driver::{
    Driver as _, DriverExt as _, Key, LeaseRef, LockId, Ttl, generate_lock_id,
};
use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{AcquireOutcome, ErrorCode, LockBackend, LockError, Lookup};

use crate::support::proxy::{FaultProxy, Mode};
use crate::support::stopped::Stopped;
use crate::support::{
    BRISK, PATIENT, RedisServer, TTL, lease, redis_now_ms, shared_redis, shared_redis_namespace,
    unique, within_a_minute,
};

/// Both layouts a single server can hold, each under a prefix of its own, so that every key
/// the backend writes can be listed.
fn backends() -> Vec<(RedisBackend, String)> {
    [KeyLayout::TypeScript, KeyLayout::Cluster]
        .into_iter()
        .map(shared_redis_namespace)
        .collect()
}

/// Every key under `prefix`, sorted.
fn keys_under(conn: &mut redis::Connection, prefix: &str) -> Vec<String> {
    let mut keys: Vec<String> = conn.keys(format!("{prefix}:*")).unwrap();
    keys.sort();
    keys
}

#[track_caller]
fn assert_internal_naming(err: &LockError, key: Option<&str>, redis_key: &str, what: &str) {
    assert_eq!(err.code(), ErrorCode::Internal, "{what}: {err}");
    if let Some(key) = key {
        assert_eq!(err.key(), Some(key), "{what}: {err:?}");
    }
    assert!(
        err.message().contains(redis_key),
        "{what}: the message names the Redis key {redis_key}: {err}"
    );
    assert!(!err.is_in_doubt(), "{what}: {err:?}");
}

// ---------------------------------------------------------------------------------------------
// Fence counters
// ---------------------------------------------------------------------------------------------

/// A fence counter that is negative, not an integer, at or past the fence limit, or of another
/// Redis type: acquire fails with `Internal` naming the counter, and writes nothing — no
/// record, no index entry, the counter as it was.
#[test]
fn a_corrupt_fence_counter_stops_acquire_before_anything_is_written() {
    let mut conn = shared_redis().connection();
    let limit = syncguard::driver::FENCE_MAX;
    for (backend, prefix) in backends() {
        let layout = backend.layout();
        for value in [
            "-5".to_owned(),
            "-1".to_owned(),
            "not a number".to_owned(),
            "1.5".to_owned(),
            "007".to_owned(),
            limit.to_string(),
            (limit + 1).to_string(),
            "99999999999999999999".to_owned(),
        ] {
            let key = unique("counter");
            let fence_key = backend.fence_key(&key).unwrap();
            let _: () = conn.set(&fence_key, &value).unwrap();
            let err = backend.acquire(&key, TTL).unwrap_err();
            let what = format!("{layout:?}, counter {value:?}");
            assert_internal_naming(&err, Some(&key), &fence_key, &what);
            assert_eq!(
                keys_under(&mut conn, &prefix),
                vec![fence_key.clone()],
                "{what}: nothing but the counter"
            );
            let kept: String = conn.get(&fence_key).unwrap();
            assert_eq!(kept, value, "{what}: the counter is left as it was");
            assert!(!backend.is_locked(&key).unwrap(), "{what}");
            let _: () = conn.del(&fence_key).unwrap();
        }

        // A counter of another Redis type.
        let key = unique("counter-hash");
        let fence_key = backend.fence_key(&key).unwrap();
        let _: () = conn.hset(&fence_key, "n", 1).unwrap();
        let err = backend.acquire(&key, TTL).unwrap_err();
        assert_internal_naming(&err, Some(&key), &fence_key, &format!("{layout:?}, hash"));
        assert_eq!(keys_under(&mut conn, &prefix), vec![fence_key.clone()]);
        let _: () = conn.del(&fence_key).unwrap();

        // One below the limit is the last fence handed out.
        let key = unique("counter-last");
        let fence_key = backend.fence_key(&key).unwrap();
        let _: () = conn.set(&fence_key, limit - 1).unwrap();
        let last = lease(backend.acquire(&key, TTL));
        assert_eq!(last.fence.value(), limit, "{layout:?}");
        assert!(backend.release(&last.lock_id).unwrap());
        let err = backend.acquire(&key, TTL).unwrap_err();
        assert_internal_naming(
            &err,
            Some(&key),
            &fence_key,
            &format!("{layout:?}, at limit"),
        );
        let _: () = conn.del(&fence_key).unwrap();
        assert!(keys_under(&mut conn, &prefix).is_empty(), "{layout:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Lock records
// ---------------------------------------------------------------------------------------------

/// Values at a lock key that are not SyncGuard records, each given the lock id it carries (if
/// any) so that operations by lock id reach it through an index entry.
fn malformed_records(lock_id: &str, key: &str, now: i64) -> Vec<(&'static str, String)> {
    let until = now + 60_000;
    let record = |fields: &str| format!("{{{fields}}}");
    let id = format!(r#""lockId":"{lock_id}""#);
    let key = format!(r#""key":{}"#, serde_json::Value::from(key));
    let times = format!(r#""expiresAtMs":{until},"acquiredAtMs":{now}"#);
    let fence = r#""fence":"000000000000007""#;
    vec![
        ("no fence", record(&format!("{id},{times},{key}"))),
        (
            "a short fence",
            record(&format!(r#"{id},{times},{key},"fence":"00000000000007""#)),
        ),
        (
            "a negative fence",
            record(&format!(r#"{id},{times},{key},"fence":"-00000000000004""#)),
        ),
        (
            "a fence of zeros",
            record(&format!(r#"{id},{times},{key},"fence":"000000000000000""#)),
        ),
        (
            "a numeric fence",
            record(&format!(r#"{id},{times},{key},"fence":7"#)),
        ),
        (
            "expiresAtMs 1e300",
            record(&format!(
                r#"{id},"expiresAtMs":1e300,"acquiredAtMs":{now},{key},{fence}"#
            )),
        ),
        (
            "expiresAtMs Infinity",
            record(&format!(
                r#"{id},"expiresAtMs":Infinity,"acquiredAtMs":{now},{key},{fence}"#
            )),
        ),
        (
            "expiresAtMs a string",
            record(&format!(
                r#"{id},"expiresAtMs":"{until}","acquiredAtMs":{now},{key},{fence}"#
            )),
        ),
        (
            "expiresAtMs a fraction",
            record(&format!(
                r#"{id},"expiresAtMs":{until}.5,"acquiredAtMs":{now},{key},{fence}"#
            )),
        ),
        (
            "expiresAtMs negative",
            record(&format!(
                r#"{id},"expiresAtMs":-1,"acquiredAtMs":{now},{key},{fence}"#
            )),
        ),
        (
            "no acquiredAtMs",
            record(&format!(r#"{id},"expiresAtMs":{until},{key},{fence}"#)),
        ),
        ("no key", record(&format!("{id},{times},{fence}"))),
        ("no lockId", record(&format!("{times},{key},{fence}"))),
        (
            "a lockId that is no lock id",
            record(&format!(r#""lockId":"short",{times},{key},{fence}"#)),
        ),
        (
            "a null lockId",
            record(&format!(r#""lockId":null,{times},{key},{fence}"#)),
        ),
        ("not JSON", format!("hello, not a lock {lock_id}")),
        ("a JSON array", format!(r#"["{lock_id}",{until}]"#)),
        ("a JSON number", "7".to_owned()),
        (
            "a foreign shape",
            format!(r#"{{"owner":"{lock_id}","until":{until}}}"#),
        ),
    ]
}

/// Every operation on a lock key holding something that is not a SyncGuard record answers
/// `Internal` naming the key — acquire, is_locked, lookup by key and by lock id, release and
/// extend by lock id and through a guard (which knows the key) — in both layouts, and leaves
/// it as it was.
#[test]
fn a_record_that_is_not_a_syncguard_record_is_internal_everywhere() {
    let mut conn = shared_redis().connection();
    for (backend, _prefix) in backends() {
        let layout = backend.layout();
        let now = redis_now_ms(&mut conn);
        let lock_id = generate_lock_id();
        let key_probe = unique("record");
        for (what, value) in malformed_records(&lock_id, &key_probe, now) {
            let what = format!("{layout:?}, {what}");
            let key = unique("record");
            let lock_key = backend.lock_key(&key).unwrap();
            let index_key = backend.index_key(&lock_id).unwrap();
            let _: () = conn.set_ex(&lock_key, &value, 60).unwrap();
            assert_every_operation_is_internal(
                &backend, &mut conn, &key, &lock_id, &lock_key, &what,
            );
            let kept: String = conn.get(&lock_key).unwrap();
            assert_eq!(kept, value, "{what}: never overwritten");
            let _: () = conn.del(&[&lock_key, &index_key]).unwrap();
        }

        // A lock key of another Redis type.
        let what = format!("{layout:?}, a hash");
        let key = unique("record-hash");
        let lock_key = backend.lock_key(&key).unwrap();
        let index_key = backend.index_key(&lock_id).unwrap();
        let _: () = conn.hset(&lock_key, "lockId", &lock_id).unwrap();
        assert_every_operation_is_internal(&backend, &mut conn, &key, &lock_id, &lock_key, &what);
        let _: () = conn.del(&[&lock_key, &index_key]).unwrap();
    }
}

/// Each operation in turn on the planted `lock_key` (and `lock_id`'s index entry, planted again
/// before each: in the cluster layout the command on the index entry, sent beside each script
/// in one round trip, applies whatever the script answers).
#[track_caller]
fn assert_every_operation_is_internal(
    backend: &RedisBackend,
    conn: &mut redis::Connection,
    key: &str,
    lock_id: &str,
    lock_key: &str,
    what: &str,
) {
    let id = LockId::new(lock_id).unwrap();
    let typed_key = Key::new(key).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let guard = LeaseRef::new(&id).with_key(&typed_key);
    let index_key = backend.index_key(lock_id).unwrap();
    type Call<'a> = Box<dyn Fn() -> syncguard::Result<()> + 'a>;
    let calls: Vec<(&str, Option<&str>, Call<'_>)> = vec![
        (
            "acquire",
            Some(key),
            Box::new(|| backend.acquire(key, TTL).map(drop)),
        ),
        (
            "is_locked",
            Some(key),
            Box::new(|| backend.is_locked(key).map(drop)),
        ),
        (
            "lookup by key",
            Some(key),
            Box::new(|| backend.lookup(Lookup::Key(key)).map(drop)),
        ),
        (
            "lookup by lock id",
            None,
            Box::new(|| backend.lookup(Lookup::LockId(lock_id)).map(drop)),
        ),
        (
            "release by lock id",
            None,
            Box::new(|| backend.release(lock_id).map(drop)),
        ),
        (
            "extend by lock id",
            None,
            Box::new(|| backend.extend(lock_id, TTL).map(drop)),
        ),
        (
            "guard release",
            None,
            Box::new(|| backend.release_lease(guard).map(drop)),
        ),
        (
            "guard extend",
            None,
            Box::new(|| backend.extend_lease(guard, ttl).map(drop)),
        ),
        (
            "batched renewal",
            None,
            Box::new(|| match backend.extend_leases(&[(guard, ttl)]).pop() {
                Some(answer) => answer.map(drop),
                None => Ok(()),
            }),
        ),
    ];
    for (operation, by_key, call) in calls {
        let _: () = conn.set_ex(&index_key, lock_key, 60).unwrap();
        let what = format!("{what}: {operation}");
        let err = call().expect_err(&what);
        assert_internal_naming(&err, by_key, lock_key, &what);
    }
    let _: () = conn.del(&index_key).unwrap();
}

/// A record the TypeScript SyncGuard wrote, with a field a later version adds, is a lock like
/// any other: held, looked up, extended (the extra field kept), released.
#[test]
fn a_typescript_record_with_extra_fields_is_a_lock() {
    let mut conn = shared_redis().connection();
    for (backend, _prefix) in backends() {
        let now = redis_now_ms(&mut conn);
        let key = unique("ts-record");
        let lock_id = generate_lock_id();
        let lock_key = backend.lock_key(&key).unwrap();
        let record = format!(
            r#"{{"lockId":"{lock_id}","expiresAtMs":{},"acquiredAtMs":{now},"key":"{key}","fence":"000000000000007","holder":{{"host":"a"}}}}"#,
            now + 60_000
        );
        let _: () = conn.set_ex(&lock_key, &record, 60).unwrap();
        let _: () = conn
            .set_ex(backend.index_key(&lock_id).unwrap(), &lock_key, 60)
            .unwrap();
        assert!(backend.is_locked(&key).unwrap());
        assert_eq!(backend.acquire(&key, TTL).unwrap(), AcquireOutcome::Locked);
        let found = backend.lookup(Lookup::LockId(&lock_id)).unwrap().unwrap();
        assert_eq!(found.fence.value(), 7);
        assert!(backend.extend(&lock_id, TTL).unwrap().is_some());
        let stored: serde_json::Value =
            serde_json::from_str(&conn.get::<_, String>(&lock_key).unwrap()).unwrap();
        assert_eq!(stored["holder"]["host"], "a", "{stored}");
        assert!(backend.release(&lock_id).unwrap());
        assert!(!backend.is_locked(&key).unwrap());
    }
}

// ---------------------------------------------------------------------------------------------
// Connecting and waiting
// ---------------------------------------------------------------------------------------------

/// A backend through `proxy` with a short connect timeout, and [`BRISK`] for the rest.
fn through(proxy: &FaultProxy, connect: Duration) -> RedisBackend {
    RedisBackend::builder()
        .url(format!("redis://127.0.0.1:{}/", proxy.port()))
        .connect_timeout(connect)
        .read_timeout(BRISK)
        .write_timeout(BRISK)
        .pool_timeout(BRISK)
        .build()
        .expect("connect through the proxy")
}

/// Once the server accepts connections and never answers, a call that needs a new connection
/// makes one attempt, which fails as `NetworkTimeout` (connect_timeout), not after the pool's
/// own wait, nor after retries.
#[test]
fn a_server_that_never_answers_costs_one_connect_attempt() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into());
    let backend = through(&proxy, Duration::from_millis(500));
    let key = unique("black-hole");
    assert!(!backend.is_locked(&key).unwrap());
    proxy.set_mode(Mode::BlackHole);
    proxy.cut_all();
    let before = proxy.connections();
    let started = std::time::Instant::now();
    let err = within_a_minute(move || backend.is_locked(&key).map(|_| backend)).unwrap_err();
    eprintln!("black hole: failed after {:?}: {err}", started.elapsed());
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(err.message().contains("connect_timeout 500ms"), "{err}");
    assert_eq!(proxy.connections() - before, 1, "one connect attempt");
}

/// A listener whose accept queue is full: the kernel drops the SYNs of further connections.
/// Returns it with the connections that fill it.
fn full_listener(port: u16) -> (std::net::TcpListener, Vec<std::net::TcpStream>) {
    let listener = std::net::TcpListener::bind(("127.0.0.1", port)).expect("take the port");
    let addr = listener.local_addr().unwrap();
    let mut queued = Vec::new();
    // std listens with a backlog of 128; a connection that is not completed at once is one
    // whose SYN went unanswered (and if one still completes later, it is never answered:
    // nobody accepts).
    while queued.len() < 1024 {
        match std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)) {
            Ok(stream) => queued.push(stream),
            Err(_) => break,
        }
    }
    (listener, queued)
}

/// The server goes away and its port is taken by a listener that never accepts (the SYN goes
/// unanswered): the next call's connect attempt is its answer, `NetworkTimeout` naming
/// connect_timeout, even when the pool timeout is shorter (it bounds the wait for a busy
/// pool's connection, not a connect).
#[test]
fn a_listener_that_never_accepts_is_a_network_timeout() {
    let mut server = RedisServer::start();
    let backend = RedisBackend::builder()
        .url(server.url())
        .connect_timeout(Duration::from_secs(2))
        .read_timeout(BRISK)
        .write_timeout(BRISK)
        .pool_timeout(Duration::from_millis(500))
        .build()
        .unwrap();
    let key = unique("never-accepts");
    assert!(!backend.is_locked(&key).unwrap());
    server.stop();
    let _full = full_listener(server.port);
    let err = within_a_minute(move || backend.is_locked(&key).map(|_| backend)).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(
        err.message().starts_with(&format!(
            "cannot connect to Redis at 127.0.0.1:{}: no answer in time (connect_timeout 2s",
            server.port
        )),
        "{err}"
    );
}

/// `build()` against a server that accepts and never answers: `NetworkTimeout`, one attempt.
#[test]
fn building_against_a_server_that_never_answers_is_a_network_timeout() {
    let server = RedisServer::start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], server.port).into());
    proxy.set_mode(Mode::BlackHole);
    let url = format!("redis://127.0.0.1:{}/", proxy.port());
    let started = std::time::Instant::now();
    let err = within_a_minute(move || {
        RedisBackend::builder()
            .url(url)
            .connect_timeout(Duration::from_millis(500))
            .read_timeout(BRISK)
            .write_timeout(BRISK)
            .pool_timeout(BRISK)
            .build()
    })
    .unwrap_err();
    eprintln!("build: failed after {:?}: {err}", started.elapsed());
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert_eq!(proxy.connections(), 1, "one connect attempt");
}

/// `WRONGTYPE` (a key syncguard uses holds a hash) is a data error, `Internal`, naming the key.
#[test]
fn wrongtype_is_internal_naming_the_key() {
    let mut conn = shared_redis().connection();
    for (backend, _prefix) in backends() {
        let key = unique("wrongtype");
        let lock_key = backend.lock_key(&key).unwrap();
        let _: () = conn.hset(&lock_key, "field", "value").unwrap();
        let err = backend.acquire(&key, TTL).unwrap_err();
        assert_internal_naming(&err, Some(&key), &lock_key, "acquire on a hash");
        let _: () = conn.del(&lock_key).unwrap();
    }
}

// ---------------------------------------------------------------------------------------------
// In doubt
// ---------------------------------------------------------------------------------------------

/// An acquisition sent to a server that then stops answering fails as `NetworkTimeout`
/// marked in doubt, with the lock id it was sent under; once the server runs again, that lock
/// id holds the key (the doubt was real), and releasing it frees the key.
#[test]
fn an_acquisition_without_an_answer_is_in_doubt_with_its_lock_id() {
    let server = RedisServer::start();
    let backend = RedisBackend::builder()
        .url(server.url())
        .connect_timeout(PATIENT)
        .read_timeout(Duration::from_millis(500))
        .write_timeout(PATIENT)
        .pool_timeout(PATIENT)
        .build()
        .unwrap();
    let key = unique("in-doubt");
    // The server knows the acquire script beforehand: an EVALSHA it did not know would be
    // answered NOSCRIPT after the stop, taking nothing.
    let warm = lease(backend.acquire(&unique("warm"), TTL));
    assert!(backend.release(&warm.lock_id).unwrap());
    let stopped = Stopped::redis(server.port);
    let err = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(err.is_in_doubt(), "{err:?}");
    let lock_id = err
        .lock_id()
        .expect("the lock id it was sent under")
        .to_owned();
    drop(stopped);

    syncguard::testing::support::wait_until("the late acquisition", PATIENT, || {
        backend.is_locked(&key).unwrap()
    });
    let found = syncguard::get_by_key_raw(&backend, &key).unwrap().unwrap();
    assert_eq!(
        found.lock_id, lock_id,
        "held under the lock id the error carried"
    );
    assert!(backend.release(&lock_id).unwrap());
    assert!(!backend.is_locked(&key).unwrap());
}

/// A refusal the server answered is not in doubt.
#[test]
fn an_answered_failure_is_not_in_doubt() {
    let mut conn = shared_redis().connection();
    let (backend, _prefix) = backends().remove(0);
    let key = unique("answered");
    let fence_key = backend.fence_key(&key).unwrap();
    let _: () = conn.set(&fence_key, "x").unwrap();
    let err = backend.acquire(&key, TTL).unwrap_err();
    assert!(!err.is_in_doubt(), "{err:?}");
    let _: () = conn.del(&fence_key).unwrap();
}
