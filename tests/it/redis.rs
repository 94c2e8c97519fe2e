//! The Redis backend against a real `redis-server` started by the tests: the contract suites,
//! the storage format shared with the TypeScript SyncGuard, server time, and faults.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use crate::support;
use crate::support::server_store::{PlantedLock, ServerStore, server_store_tests};
use crate::support::{
    RedisServer, TTL, lease, redis_now_ms, shared_redis, shared_redis_backend,
    shared_redis_with_connection, unique,
};
use redis::Commands as _;
use serde_json::Value as Json;
use syncguard::driver::{DriverExt as _, MAX_TTL_MS, generate_lock_id, make_storage_key};
use syncguard::redis::RedisBackend;
use syncguard::testing::support::wait_until_unlocked;
use syncguard::{ErrorCode, LockBackend};

syncguard::backend_contract!(shared_redis_backend);
syncguard::guard_contract!(shared_redis_backend);
syncguard::semaphore_contract!(shared_redis_backend);
syncguard::line_contract!(shared_redis_backend);
syncguard::shared_contract!(shared_redis_backend);
syncguard::multi_contract!(shared_redis_backend);
syncguard::lost_answer_contract!(shared_redis_backend);
syncguard::break_contract!(shared_redis_backend);
syncguard::watch_contract!(shared_redis_backend);
syncguard::leadership_contract!(shared_redis_backend);

/// The capacity check of the shared mode (not in `shared_contract!`: once per store, not per
/// topology).
#[test]
fn a_thousand_readers_share_a_key() {
    syncguard::testing::capacity::a_thousand_readers_share_a_key(shared_redis_backend());
}

// ---------------------------------------------------------------------------------------------
// Storage format (shared with the TypeScript SyncGuard)
// ---------------------------------------------------------------------------------------------

#[test]
fn stores_the_three_keys_of_the_syncguard_layout() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("layout");
    let lease = lease(backend.acquire(&key, TTL));

    let lock_key = format!("syncguard:{key}");
    let index_key = format!("syncguard:id:{}", lease.lock_id);
    let fence_key = format!("syncguard:fence:syncguard:{key}");
    assert_eq!(backend.lock_key(&key).unwrap(), lock_key);
    assert_eq!(backend.index_key(&lease.lock_id).unwrap(), index_key);
    assert_eq!(backend.fence_key(&key).unwrap(), fence_key);

    let record: String = conn.get(&lock_key).unwrap();
    let record: serde_json::Map<String, Json> = serde_json::from_str(&record).unwrap();
    let fields: BTreeSet<&str> = record.keys().map(String::as_str).collect();
    assert_eq!(
        fields,
        BTreeSet::from(["acquiredAtMs", "expiresAtMs", "fence", "key", "lockId"])
    );
    assert_eq!(record["lockId"], Json::from(lease.lock_id.clone()));
    assert_eq!(record["key"], Json::from(key.clone()));
    assert_eq!(record["fence"], Json::from(lease.fence.to_string()));
    assert_eq!(record["expiresAtMs"].as_i64(), Some(lease.expires_at_ms));
    assert_eq!(
        record["acquiredAtMs"].as_i64(),
        Some(lease.expires_at_ms - TTL.as_millis() as i64)
    );

    let index: String = conn.get(&index_key).unwrap();
    assert_eq!(index, lock_key, "the index holds the full lock key");

    // Both keys expire at the same instant: the lease's expiry.
    let lock_expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg(&lock_key)
        .query(&mut conn)
        .unwrap();
    let index_expiry: i64 = redis::cmd("PEXPIRETIME")
        .arg(&index_key)
        .query(&mut conn)
        .unwrap();
    // PX counts from Redis' cached millisecond clock, which may tick between the script's two
    // SETs (seen: 1 ms apart), and the record from TIME floored to ms.
    assert!(
        (lock_expiry - index_expiry).abs() <= 1,
        "{lock_expiry} vs {index_expiry}"
    );
    assert!((lock_expiry - lease.expires_at_ms).abs() <= 1);

    // The fence counter: a plain integer without TTL.
    let counter: i64 = conn.get(&fence_key).unwrap();
    assert_eq!(counter, 1);
    let fence_ttl: i64 = conn.pttl(&fence_key).unwrap();
    assert_eq!(fence_ttl, -1, "fence counters never expire");
    assert!(backend.release(&lease.lock_id).unwrap());
}

/// The longest TTL survives Redis' Lua `cjson` (14 significant digits): the record holds the
/// expiry the acquire and the extend answered, digit for digit, as a plain integer that the
/// TypeScript SyncGuard's `JSON.parse` reads back exactly.
#[test]
fn the_longest_ttl_is_stored_digit_for_digit() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("max-ttl");
    let max = Duration::from_millis(MAX_TTL_MS as u64);
    let lease = lease(backend.acquire(&key, max));
    let lock_key = backend.lock_key(&key).unwrap();
    let stored_expiry = |conn: &mut redis::Connection| -> String {
        let record: String = conn.get(&lock_key).unwrap();
        let record: serde_json::Map<String, Json> = serde_json::from_str(&record).unwrap();
        // The number as written, not as parsed: `1.2345678901235e+13` would parse close.
        record["expiresAtMs"].to_string()
    };
    assert_eq!(stored_expiry(&mut conn), lease.expires_at_ms.to_string());

    let extended = backend.extend(&lease.lock_id, max).unwrap().unwrap();
    assert_eq!(stored_expiry(&mut conn), extended.to_string());
    assert!(backend.release(&lease.lock_id).unwrap());
}

/// An expired lock's keys go with their PX; its fence counter stays, without a TTL. (That the
/// counter carries on is checked for every server store, in `server_store`.)
#[test]
fn an_expired_lock_leaves_its_fence_counter_alone() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("fence-px");
    let short = lease(backend.acquire(&key, Duration::from_millis(50)));
    wait_until_unlocked(&backend, &key);
    for gone in [
        backend.lock_key(&key).unwrap(),
        backend.index_key(&short.lock_id).unwrap(),
    ] {
        assert!(
            !conn.exists::<_, bool>(&gone).unwrap(),
            "{gone} expired with its PX"
        );
    }
    let fence_key = backend.fence_key(&key).unwrap();
    assert_eq!(conn.get::<_, i64>(&fence_key).unwrap(), 1);
    assert_eq!(conn.pttl::<_, i64>(&fence_key).unwrap(), -1);
}

#[test]
fn long_prefixes_force_hash_truncation_of_all_three_keys() {
    let prefix = format!("{}-{}", "p".repeat(900), &generate_lock_id()[..8]);
    let backend = RedisBackend::builder()
        .url(shared_redis().url())
        .key_prefix(&prefix)
        .build()
        .unwrap();
    let mut conn = shared_redis().connection();
    let key = unique("truncated").repeat(3);
    let lease = lease(backend.acquire(&key, TTL));

    let lock_key = make_storage_key(&prefix, &key, 1000, 26).unwrap();
    let index_key = make_storage_key(&prefix, &format!("id:{}", lease.lock_id), 1000, 26).unwrap();
    let fence_key = make_storage_key(&prefix, &format!("fence:{lock_key}"), 1000, 26).unwrap();
    assert_eq!(
        lock_key.len(),
        prefix.len() + 1 + 22,
        "the lock key is hashed"
    );
    assert_eq!(
        fence_key.len(),
        prefix.len() + 1 + 22,
        "the fence key is hashed"
    );
    assert!(
        index_key.ends_with(&lease.lock_id),
        "index keys stay readable"
    );
    for redis_key in [&lock_key, &index_key, &fence_key] {
        assert!(
            conn.exists::<_, bool>(redis_key).unwrap(),
            "{redis_key:.40}…"
        );
        assert!(redis_key.len() + 26 <= 1000);
    }
    let record: String = conn.get(&lock_key).unwrap();
    assert!(record.contains(&key), "the record keeps the full user key");
    let raw = syncguard::get_by_id_raw(&backend, &lease.lock_id)
        .unwrap()
        .unwrap();
    assert_eq!(raw.key, key);
    assert!(backend.release(&lease.lock_id).unwrap());
}

#[test]
fn url_prefix_option_and_connect() {
    let prefix = format!("app{}", &generate_lock_id()[..6]);
    let url = format!("{}?prefix={prefix}", shared_redis().url());
    let backend = syncguard::connect(&url).unwrap();
    assert_eq!(backend.capabilities().backend, "redis");
    assert_eq!(
        backend.capabilities().time_authority,
        syncguard::TimeAuthority::Server
    );
    let key = unique("prefixed");
    let lease = lease(backend.acquire(&key, TTL));
    let mut conn = shared_redis().connection();
    assert!(conn.exists::<_, bool>(format!("{prefix}:{key}")).unwrap());
    assert!(backend.release(&lease.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Holder descriptions with the TypeScript SyncGuard: its scripts read, renew and release our
// records (the `holder` field kept), and its records (none) are ours to read and release
// (`server_store`'s `honours_locks_the_typescript_library_wrote`)
// ---------------------------------------------------------------------------------------------

/// The TypeScript SyncGuard's Lua scripts (v2.5, `redis/scripts.ts`), step for step: the same
/// commands, checks and answers, on the TypeScript layout.
mod typescript {
    /// The clock every one of its scripts reads.
    const NOW: &str = "local t = redis.call('TIME')\n\
                       local now = t[1] * 1000 + math.floor(t[2] / 1000)\n";

    /// Lookup by key. KEYS: lock key; ARGV: tolerance. The record re-encoded, or nil.
    pub fn lookup_by_key() -> redis::Script {
        redis::Script::new(&format!(
            "{NOW}local raw = redis.call('GET', KEYS[1])\n\
             if not raw then return nil end\n\
             local lock = cjson.decode(raw)\n\
             if lock.expiresAtMs <= now - tonumber(ARGV[1]) then return nil end\n\
             return cjson.encode(lock)"
        ))
    }

    /// Lookup by lock id. KEYS: index key; ARGV: lock id, tolerance. The record as stored,
    /// or nil.
    pub fn lookup_by_id() -> redis::Script {
        redis::Script::new(&format!(
            "{NOW}local lock_key = redis.call('GET', KEYS[1])\n\
             if not lock_key then return nil end\n\
             local raw = redis.call('GET', lock_key)\n\
             if not raw then return nil end\n\
             local lock = cjson.decode(raw)\n\
             if lock.lockId ~= ARGV[1] then return nil end\n\
             if lock.expiresAtMs <= now - tonumber(ARGV[2]) then return nil end\n\
             return raw"
        ))
    }

    /// Extend. KEYS: index key; ARGV: lock id, tolerance, ttl. `{1, expiresAtMs}` or 0; the
    /// record decoded, changed and encoded again, whatever else it holds.
    pub fn extend() -> redis::Script {
        redis::Script::new(&format!(
            "{NOW}local lock_key = redis.call('GET', KEYS[1])\n\
             if not lock_key then return 0 end\n\
             local raw = redis.call('GET', lock_key)\n\
             if not raw then return 0 end\n\
             local lock = cjson.decode(raw)\n\
             if lock.expiresAtMs <= now - tonumber(ARGV[2]) then\n\
               redis.call('DEL', lock_key, KEYS[1])\n\
               return 0\n\
             end\n\
             if lock.lockId ~= ARGV[1] then return 0 end\n\
             local ttl = tonumber(ARGV[3])\n\
             lock.expiresAtMs = now + ttl\n\
             redis.call('SET', lock_key, cjson.encode(lock), 'PX', ttl)\n\
             redis.call('SET', KEYS[1], lock_key, 'PX', ttl)\n\
             return {{1, lock.expiresAtMs}}"
        ))
    }

    /// Release. KEYS: index key; ARGV: lock id, tolerance. 1 released, 0 not the owner, -1
    /// not found, -2 expired.
    pub fn release() -> redis::Script {
        redis::Script::new(&format!(
            "{NOW}local lock_key = redis.call('GET', KEYS[1])\n\
             if not lock_key then return -1 end\n\
             local raw = redis.call('GET', lock_key)\n\
             if not raw then return -1 end\n\
             local lock = cjson.decode(raw)\n\
             if lock.expiresAtMs <= now - tonumber(ARGV[2]) then\n\
               redis.call('DEL', lock_key, KEYS[1])\n\
               return -2\n\
             end\n\
             if lock.lockId ~= ARGV[1] then return 0 end\n\
             redis.call('DEL', lock_key, KEYS[1])\n\
             return 1"
        ))
    }

    /// What its `lookup` reads of a script's answer (`JSON.parse`, then these fields).
    #[derive(Debug, serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct LockData {
        pub lock_id: String,
        pub expires_at_ms: i64,
        pub acquired_at_ms: i64,
        pub key: String,
        pub fence: String,
    }
}

/// A lock we take with a holder description is the TypeScript SyncGuard's to read, renew and
/// release with its own scripts; its renewal keeps the description, which we read back.
#[test]
fn the_typescript_library_reads_renews_and_releases_locks_with_a_holder() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("holder-to-node");
    let held = support::lease_held_by(&backend, &key, support::ODD_HOLDER);
    let lock_key = backend.lock_key(&key).unwrap();
    let index_key = backend.index_key(&held.lock_id).unwrap();
    let stored: Json = serde_json::from_str(&conn.get::<_, String>(&lock_key).unwrap()).unwrap();
    assert_eq!(
        stored["holder"],
        Json::from(support::ODD_HOLDER),
        "{stored}"
    );

    let by_key: Option<String> = typescript::lookup_by_key()
        .key(&lock_key)
        .arg(1000)
        .invoke(&mut conn)
        .unwrap();
    let by_id: Option<String> = typescript::lookup_by_id()
        .key(&index_key)
        .arg(&held.lock_id)
        .arg(1000)
        .invoke(&mut conn)
        .unwrap();
    for answer in [by_key, by_id] {
        let answer = answer.expect("the TypeScript lookup finds the lock");
        let seen: typescript::LockData = serde_json::from_str(&answer).unwrap();
        assert_eq!(seen.lock_id, held.lock_id);
        assert_eq!(seen.key, key);
        assert_eq!(seen.fence, held.fence.to_string());
        assert_eq!(seen.expires_at_ms, held.expires_at_ms);
        assert!(seen.acquired_at_ms <= seen.expires_at_ms);
    }

    let (extended, expires_at_ms): (i64, i64) = typescript::extend()
        .key(&index_key)
        .arg(&held.lock_id)
        .arg(1000)
        .arg(60_000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(extended, 1);
    let info = syncguard::get_by_id(&backend, &held.lock_id)
        .unwrap()
        .unwrap();
    assert_eq!(info.expires_at_ms, expires_at_ms);
    assert_eq!(
        info.holder.as_deref(),
        Some(support::ODD_HOLDER),
        "the TypeScript renewal keeps the holder"
    );

    let released: i64 = typescript::release()
        .key(&index_key)
        .arg(&held.lock_id)
        .arg(1000)
        .invoke(&mut conn)
        .unwrap();
    assert_eq!(released, 1);
    assert!(!backend.is_locked(&key).unwrap());
    assert!(!backend.release(&held.lock_id).unwrap());
    let next = lease(backend.acquire(&key, TTL));
    assert_eq!(next.fence.value(), held.fence.value() + 1);
    assert_eq!(
        syncguard::get_by_key(&backend, &key)
            .unwrap()
            .unwrap()
            .holder,
        None
    );
    assert!(backend.release(&next.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// The store as another client sees it: Redis TIME decides (the scripts judge expiry by it),
// fence counters outlive their locks, and locks the TypeScript SyncGuard wrote are honoured
// ---------------------------------------------------------------------------------------------

server_store_tests!(support::patient_redis, shared_redis(), connection);

/// Redis as another client (the TypeScript SyncGuard) sees it: `TIME`, and the keys of the
/// SyncGuard layout under the default prefix.
impl ServerStore for redis::Connection {
    fn now_ms(&mut self) -> i64 {
        redis_now_ms(self)
    }

    /// The record as the TypeScript SyncGuard writes it, field order and all, its lock-id
    /// index, and the fence counter. Redis drops the lock's keys after a minute, whatever they
    /// say.
    fn write_lock(&mut self, lock: &PlantedLock) {
        let PlantedLock {
            key,
            lock_id,
            acquired_at_ms,
            expires_at_ms,
            ..
        } = lock;
        let fence = lock.fence_string();
        let record = format!(
            r#"{{"fence":"{fence}","key":"{key}","acquiredAtMs":{acquired_at_ms},"lockId":"{lock_id}","expiresAtMs":{expires_at_ms}}}"#
        );
        let lock_key = format!("syncguard:{key}");
        let _: () = self.set_ex(&lock_key, &record, 60).unwrap();
        let index_key = format!("syncguard:id:{lock_id}");
        let _: () = self.set_ex(index_key, &lock_key, 60).unwrap();
        let fence_key = format!("syncguard:fence:{lock_key}");
        let _: () = self.set(fence_key, lock.fence).unwrap();
    }

    fn lock_is_stored(&mut self, key: &str) -> bool {
        self.exists::<_, bool>(format!("syncguard:{key}")).unwrap()
    }

    fn fence_counter(&mut self, key: &str) -> Option<i64> {
        self.get(format!("syncguard:fence:syncguard:{key}"))
            .unwrap()
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile contents
// ---------------------------------------------------------------------------------------------

#[test]
fn values_that_are_not_syncguard_locks_give_typed_errors() {
    let (backend, mut conn) = shared_redis_with_connection();

    let key = unique("not-json");
    let lock_key = backend.lock_key(&key).unwrap();
    let _: () = conn.set(&lock_key, "hello, not a lock").unwrap();
    support::assert_unreadable(&backend, &key);
    let kept: String = conn.get(&lock_key).unwrap();
    assert_eq!(
        kept, "hello, not a lock",
        "foreign data is never overwritten"
    );

    let key = unique("wrong-type");
    let lock_key = backend.lock_key(&key).unwrap();
    let _: () = conn.hset(&lock_key, "field", "value").unwrap();
    support::assert_acquire_fails(&backend, &key, ErrorCode::Internal);

    let key = unique("json-but-not-ours");
    let lock_key = backend.lock_key(&key).unwrap();
    let _: () = conn.set(&lock_key, r#"{"expiresAtMs":"soon"}"#).unwrap();
    support::assert_acquire_fails(&backend, &key, ErrorCode::Internal);

    let key = unique("bad-counter");
    let _: () = conn
        .set(backend.fence_key(&key).unwrap(), "not a number")
        .unwrap();
    support::assert_unreadable_counter_stops_acquire(&backend, &key);

    let _: () = conn
        .del(&[
            backend.lock_key(&unique("x")).unwrap(),
            backend.fence_key(&key).unwrap(),
        ])
        .unwrap();
}

/// A user key that names another key's fence counter can neither overwrite nor delete it.
#[test]
fn keys_colliding_with_fence_counters_cannot_touch_them() {
    let (backend, mut conn) = shared_redis_with_connection();
    let victim = unique("victim");
    let first = lease(backend.acquire(&victim, TTL));
    assert!(backend.release(&first.lock_id).unwrap());
    let fence_key = backend.fence_key(&victim).unwrap();
    let attacker = fence_key.strip_prefix("syncguard:").unwrap().to_owned();
    assert_eq!(backend.lock_key(&attacker).unwrap(), fence_key);

    support::assert_acquire_fails(&backend, &attacker, ErrorCode::Internal);
    let counter: i64 = conn.get(&fence_key).unwrap();
    assert_eq!(counter, 1);
    let next = lease(backend.acquire(&victim, TTL));
    assert_eq!(next.fence.value(), 2, "the counter carried on");
    assert!(backend.release(&next.lock_id).unwrap());
}

#[test]
fn fence_overflow_is_refused_without_taking_the_lock() {
    let (backend, mut conn) = shared_redis_with_connection();
    let key = unique("overflow");
    let _: () = conn
        .set(
            backend.fence_key(&key).unwrap(),
            syncguard::driver::FENCE_MAX,
        )
        .unwrap();
    let err = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal);
    assert!(!backend.is_locked(&key).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Faults, each on a server of its own
// ---------------------------------------------------------------------------------------------

#[test]
fn stopped_server_gives_service_unavailable_and_no_hang() {
    let mut server = RedisServer::start();
    let backend = Arc::new(support::impatient_redis(&server.url()).build().unwrap());
    let key = unique("down");
    let _ = lease(backend.acquire(&key, TTL));
    server.stop();
    for _ in 0..2 {
        let (backend, key) = (Arc::clone(&backend), key.clone());
        let err = support::unavailable_within_a_minute(move || backend.acquire(&key, TTL));
        // The pool's reconnect failed: its cause, not r2d2's "timed out waiting".
        assert_eq!(
            err.message(),
            format!(
                "cannot connect to Redis at 127.0.0.1:{}: connection refused",
                server.port
            )
        );
    }
    let url = server.url();
    support::unavailable_within_a_minute(move || RedisBackend::connect(&url));
}

#[test]
fn restarted_server_is_used_again_on_the_next_call() {
    let mut server = RedisServer::start();
    let backend = support::impatient_redis(&server.url()).build().unwrap();
    let key = unique("restart");
    let held = lease(backend.acquire(&key, TTL));
    server.restart();
    // The pooled connection is dead and the scripts are gone: the very next call must
    // reconnect and reload them by itself. The restarted server lost the lock.
    assert!(!backend.is_locked(&key).unwrap());
    assert!(!backend.release(&held.lock_id).unwrap());
    let again = lease(backend.acquire(&key, TTL));
    assert_eq!(
        again.fence.value(),
        1,
        "no persistence: the counter restarted"
    );
}

/// A listener that never accepts: the kernel completes the TCP handshake, nobody answers.
fn silent_listener() -> (std::net::TcpListener, u16) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    (listener, port)
}

/// A plain-text peer that answers whatever it is sent with a Redis error line, then waits for
/// the client to hang up: what a TLS client meets on a port that does not speak TLS.
fn plain_text_peer() -> (std::thread::JoinHandle<()>, u16) {
    use std::io::{Read as _, Write as _};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let peer = std::thread::spawn(move || {
        if let Ok((mut socket, _)) = listener.accept() {
            let _ = socket.write_all(b"-ERR not TLS\r\n");
            let _ = std::io::copy(&mut socket, &mut std::io::sink());
            let _ = socket.read(&mut [0; 1]);
        }
    });
    (peer, port)
}

/// Connecting, against real servers and sockets the test starts: each failure's code and
/// message. Every message names host:port and the cause; none shows the password.
#[test]
fn connect_failures_name_the_server_and_the_cause() {
    const PASSWORD: &str = "correct-horse";
    const WRONG: &str = "battery-staple";
    let locked = RedisServer::start_with_password(PASSWORD);
    let plain = shared_redis();
    let good = RedisBackend::connect(&locked.url()).unwrap();
    assert!(!good.is_locked(&unique("auth")).unwrap());
    assert!(!format!("{good:?}").contains(PASSWORD));

    let refused = support::free_port();
    let (_silent, silent) = silent_listener();
    let (peer, peer_port) = plain_text_peer();
    let (p, l) = (plain.port, locked.port);
    let timeouts = "connect_timeout 300ms, read_timeout 300ms";
    // (URL, code, the whole message or, where the OS words it, its start)
    let rows: Vec<(String, ErrorCode, String)> = vec![
        (
            format!("redis://:{WRONG}@127.0.0.1:{refused}/"),
            ErrorCode::ServiceUnavailable,
            format!("cannot connect to Redis at 127.0.0.1:{refused}: connection refused"),
        ),
        (
            format!("redis://:{WRONG}@nonexistent.invalid:{refused}/"),
            ErrorCode::ServiceUnavailable,
            format!(
                "cannot connect to Redis at nonexistent.invalid:{refused}: host name not \
                 resolved ("
            ),
        ),
        (
            format!("redis://:{WRONG}@127.0.0.1:{l}/"),
            ErrorCode::AuthFailed,
            format!(
                "cannot connect to Redis at 127.0.0.1:{l}: authentication failed: the server \
                 refused the user name or password (Password authentication failed - \
                 AuthenticationFailed)"
            ),
        ),
        (
            format!("redis://:{WRONG}@127.0.0.1:{l}/3"),
            ErrorCode::AuthFailed,
            format!("cannot connect to Redis at 127.0.0.1:{l} (db 3): authentication failed: "),
        ),
        (
            format!("redis://127.0.0.1:{l}/"),
            ErrorCode::AuthFailed,
            format!(
                "cannot connect to Redis at 127.0.0.1:{l}: authentication required (\"NOAUTH\": \
                 Authentication required.): the server has a password; give it in the URL \
                 (redis://:PASSWORD@host:port/)"
            ),
        ),
        (
            format!("rediss://:{WRONG}@127.0.0.1:{p}/"),
            ErrorCode::NetworkTimeout,
            format!(
                "cannot connect to Redis at 127.0.0.1:{p}: no answer in time ({timeouts}); a \
                 TLS client (rediss://) waits like this for a server that does not speak TLS on \
                 this port"
            ),
        ),
        (
            format!("rediss://:{WRONG}@127.0.0.1:{peer_port}/"),
            ErrorCode::ServiceUnavailable,
            format!(
                "cannot connect to Redis at 127.0.0.1:{peer_port}: TLS failure: received \
                 corrupt message of type InvalidContentType; does the server speak TLS on this \
                 port?"
            ),
        ),
        (
            format!("redis://:{WRONG}@127.0.0.1:{silent}/"),
            ErrorCode::NetworkTimeout,
            format!(
                "cannot connect to Redis at 127.0.0.1:{silent}: no answer in time ({timeouts})"
            ),
        ),
    ];
    for (url, code, message) in rows {
        // Short timeouts only where no answer is the point; a peer that answers gets as long as
        // a loaded machine needs.
        let timeout = if code == ErrorCode::NetworkTimeout {
            Duration::from_millis(300)
        } else {
            support::PATIENT
        };
        let err = support::within_a_minute({
            let url = url.clone();
            move || {
                RedisBackend::builder()
                    .url(url)
                    .connect_timeout(timeout)
                    .read_timeout(timeout)
                    .build()
            }
        })
        .unwrap_err();
        assert_eq!(err.code(), code, "{url}: {err}");
        assert!(
            err.message().starts_with(&message),
            "{url}:\n{err}\n{message}"
        );
        if !message.ends_with(['(', ' ']) {
            assert_eq!(err.message(), message, "{url}");
        }
        assert!(!format!("{err} {err:?}").contains(WRONG), "{err:?}");
    }
    peer.join().unwrap();
}

#[test]
fn an_application_pool_works_and_pool_exhaustion_is_rate_limited() {
    let pool = support::pool_of_one(redis::Client::open(shared_redis().url()).unwrap());
    let backend = RedisBackend::builder().pool(pool.clone()).build().unwrap();
    let err = support::exhausted_pool_is_rate_limited(&backend, pool.get().unwrap());
    assert_eq!(
        err.message(),
        "no pooled Redis connection became free within 300ms (pool_size 1; Redis through the \
         application's pool)"
    );
}

// ---------------------------------------------------------------------------------------------
// Many threads through one Locker
// ---------------------------------------------------------------------------------------------

/// The cluster layout on one server: the index entry (in the lock id's slot, outside the
/// scripts) is written with the record, follows every renewal — a guard's, a batch's — and
/// goes with a guard's release, all in the same pipelines; a bare lock id still finds the lock.
mod cluster_layout_on_one_server {
    use super::*;
    use syncguard::driver::{Driver, Key, LeaseRef, LockId, Outcome, Ttl};
    use syncguard::redis::KeyLayout;

    fn backend() -> RedisBackend {
        support::patient_redis(&shared_redis().url())
            .layout(KeyLayout::Cluster)
            .build()
            .expect("connect to the test Redis")
    }

    syncguard::backend_contract!(backend);
    syncguard::guard_contract!(topology: backend);
    syncguard::semaphore_contract!(backend);
    syncguard::line_contract!(topology: backend);
    syncguard::shared_contract!(topology: backend);
    syncguard::multi_contract!(backend);
    syncguard::lost_answer_contract!(backend);
    syncguard::break_contract!(backend);
    syncguard::watch_contract!(backend);
    syncguard::leadership_contract!(backend);

    #[test]
    fn the_index_entry_follows_the_record() {
        let backend = backend();
        let mut conn = shared_redis().connection();
        let key = unique("cluster-layout-index");
        let granted = lease(backend.acquire(&key, TTL));
        let index_key = backend.index_key(&granted.lock_id).unwrap();
        let indexed: Option<String> = conn.get(&index_key).unwrap();
        assert_eq!(indexed, Some(backend.lock_key(&key).unwrap()));

        let lock_id = LockId::new(&granted.lock_id).unwrap();
        let user_key = Key::new(&key).unwrap();
        let guard = LeaseRef::new(&lock_id).with_key(&user_key);
        let long = Ttl::new(Duration::from_secs(600)).unwrap();
        assert!(matches!(
            backend.extend_lease(guard, long).unwrap(),
            Outcome::Applied(_)
        ));
        let pttl: i64 = conn.pttl(&index_key).unwrap();
        assert!(
            pttl > 300_000,
            "a guard's extend renews the index entry: {pttl}"
        );

        let longer = Ttl::new(Duration::from_secs(1200)).unwrap();
        let answers = backend.extend_leases(&[(guard, longer)]);
        assert!(
            matches!(answers[..], [Ok(Outcome::Applied(_))]),
            "{answers:?}"
        );
        let pttl: i64 = conn.pttl(&index_key).unwrap();
        assert!(
            pttl > 900_000,
            "a batch renewal renews the index entry: {pttl}"
        );

        let found = backend
            .lookup_raw(syncguard::Lookup::LockId(&granted.lock_id))
            .unwrap()
            .expect("found by its lock id");
        assert_eq!(found.key, key);

        assert!(matches!(
            backend.release_lease(guard).unwrap(),
            Outcome::Applied(())
        ));
        let exists: bool = conn.exists(&index_key).unwrap();
        assert!(!exists, "a guard's release deletes the index entry");
        assert!(!backend.release(&granted.lock_id).unwrap());
    }
}
