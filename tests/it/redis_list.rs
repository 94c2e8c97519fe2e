//! Listing on Redis beyond the contract: what SCAN finds besides lock records (index entries,
//! fence counters, other values) is skipped, hashed keys are found by their prefix, the bound
//! on the work is kept and reported (and can be raised where other data crowds the database),
//! and a Cluster is scanned on every primary.

use std::collections::BTreeSet;

use redis::Commands as _;
use syncguard::redis::{DEFAULT_LIST_SCAN_BUDGET, KeyLayout, RedisBackend};
use syncguard::{Coverage, LeaseKind, LockBackend, MAX_LIST_LIMIT};

use crate::support::{
    RedisServer, TTL, lease, patient_redis, shared_cluster, shared_redis, shared_redis_namespace,
    unique,
};

fn listed_keys(backend: &RedisBackend, prefix: &str, limit: usize) -> (Vec<String>, Coverage) {
    let listed = backend.list_raw(prefix, LeaseKind::Lock, limit).unwrap();
    (
        listed.locks.into_iter().map(|lock| lock.key).collect(),
        listed.coverage,
    )
}

/// In the TypeScript layout a user key `id:…` or `fence:…` names keys of the index and fence
/// namespaces: the listing tells records from the rest by what they hold, not by their names.
/// Another application's string, a hash, and a record copied under a name that is not its
/// key's are skipped; the listing itself writes nothing.
#[test]
fn only_records_stored_where_they_belong_are_listed() {
    for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
        let (backend, namespace) = shared_redis_namespace(layout);
        let mut conn = shared_redis().connection();
        let keys = ["job", "id:AAAAAAAAAAAAAAAAAAAAAA", "fence:x", "a{b}c", "é"];
        let leases: Vec<_> = keys
            .iter()
            .map(|key| lease(backend.acquire(key, TTL)))
            .collect();
        let _: () = conn.set(format!("{namespace}:foreign"), "hello").unwrap();
        let _: () = conn
            .hset(format!("{namespace}:{{hash}}"), "lockId", "x")
            .unwrap();
        let record: String = conn.get(backend.lock_key("job").unwrap()).unwrap();
        let _: () = conn.set(format!("{namespace}:{{copy}}"), &record).unwrap();
        let _: () = conn.set(format!("{namespace}:copy"), &record).unwrap();
        let stored: BTreeSet<String> = conn.keys(format!("{namespace}:*")).unwrap();

        let mut expected: Vec<String> = keys.iter().map(|key| (*key).to_owned()).collect();
        expected.sort();
        assert_eq!(
            listed_keys(&backend, "", 100),
            (expected, Coverage::Complete),
            "{layout:?}"
        );
        assert_eq!(
            listed_keys(&backend, "id:", 100),
            (vec![keys[1].to_owned()], Coverage::Complete),
            "{layout:?}"
        );
        let after: BTreeSet<String> = conn.keys(format!("{namespace}:*")).unwrap();
        assert_eq!(after, stored, "a listing writes nothing");
        for lease in leases {
            assert!(backend.release(&lease.lock_id).unwrap());
        }
    }
}

/// With a long key prefix, long keys are stored under their hash (the TypeScript layout, as
/// `make_storage_key` does): the listing finds them by the `key` their record holds.
#[test]
fn hashed_keys_are_found_by_their_prefix() {
    let namespace = format!(
        "{}-{}",
        unique("list-long").replace(':', "-"),
        "n".repeat(440)
    );
    let backend = patient_redis(&shared_redis().url())
        .key_prefix(&namespace)
        .build()
        .expect("connect to the test Redis");
    let short = "report:short".to_owned();
    let long = format!("report:{}", "l".repeat(500));
    let elsewhere = format!("other:{}", "l".repeat(500));
    let stored_long = backend.lock_key(&long).unwrap();
    assert_eq!(
        stored_long.len(),
        namespace.len() + 1 + 22,
        "the long key is stored hashed: {stored_long}"
    );
    assert_eq!(
        backend.lock_key(&short).unwrap(),
        format!("{namespace}:{short}")
    );
    let leases: Vec<_> = [&short, &long, &elsewhere]
        .iter()
        .map(|key| lease(backend.acquire(key, TTL)))
        .collect();
    let (keys, coverage) = listed_keys(&backend, "report:", 10);
    assert_eq!(keys, [long.clone(), short.clone()]);
    assert_eq!(coverage, Coverage::Complete);
    let (keys, _) = listed_keys(&backend, "report:l", 10);
    assert_eq!(keys, [long]);
    for lease in leases {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}

/// A listing asks SCAN to examine at most `list_scan_budget` keys: one that runs out before
/// the end of the keyspace says so, and lists only live locks under the prefix, sorted.
#[test]
fn the_scan_budget_bounds_the_work_and_is_reported() {
    let prefix = unique("list-budget");
    let backend = patient_redis(&shared_redis().url())
        .list_scan_budget(10)
        .build()
        .expect("connect to the test Redis");
    // 60 locks are 180 keys (record, index entry, fence counter), in a table of at least 256
    // buckets: SCAN with COUNT 10 cannot walk them all in one call (it stops after 10 keys, or
    // after 100 buckets where the server filters as it walks).
    let keys: Vec<String> = (0..60).map(|n| format!("{prefix}:{n:02}")).collect();
    let leases: Vec<_> = keys
        .iter()
        .map(|key| lease(backend.acquire(key, TTL)))
        .collect();

    let (found, coverage) = listed_keys(&backend, &prefix, MAX_LIST_LIMIT);
    assert_eq!(coverage, Coverage::WorkBoundReached);
    assert!(
        found.len() < keys.len(),
        "{} of {}",
        found.len(),
        keys.len()
    );
    assert!(found.iter().all(|key| keys.contains(key)), "{found:?}");
    assert!(found.windows(2).all(|w| w[0] < w[1]), "sorted: {found:?}");

    let unbounded = patient_redis(&shared_redis().url())
        .list_scan_budget(DEFAULT_LIST_SCAN_BUDGET)
        .build()
        .unwrap();
    assert_eq!(
        listed_keys(&unbounded, &prefix, MAX_LIST_LIMIT),
        (keys.clone(), Coverage::Complete)
    );
    for lease in leases {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}

/// On a Cluster every primary is scanned: locks whose slots lie on all three primaries are
/// listed together, sorted, keys with braces (stored under their hash) among them.
#[test]
fn a_cluster_is_listed_on_every_primary() {
    let cluster = shared_cluster();
    let backend = RedisBackend::connect(&cluster.url()).expect("connect to the test Cluster");
    let prefix = unique("list-cluster");
    let asked = cluster.nodes[0].port;
    let mut keys = vec![format!("{prefix}:{{braced}}")];
    let mut primaries = BTreeSet::new();
    for n in 0.. {
        let key = format!("{prefix}:{n:03}");
        let slot = cluster.key_slot(&backend.lock_key(&key).unwrap());
        primaries.insert(cluster.primary_of(slot, asked).expect("a primary"));
        keys.push(key);
        if primaries.len() == 3 && keys.len() >= 9 {
            break;
        }
        assert!(n < 200, "keys on every primary");
    }
    let leases: Vec<_> = keys
        .iter()
        .map(|key| lease(backend.acquire(key, TTL)))
        .collect();
    keys.sort();
    assert_eq!(
        listed_keys(&backend, &prefix, 100),
        (keys.clone(), Coverage::Complete)
    );
    assert_eq!(
        listed_keys(&backend, &prefix, 4),
        (keys[..4].to_vec(), Coverage::LimitReached)
    );
    for lease in leases {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    assert_eq!(
        listed_keys(&backend, &prefix, 100),
        (Vec::new(), Coverage::Complete)
    );
}

/// Keys of another application that a crowded server holds: well above the default scan
/// budget, so that a default listing cannot walk them all.
const OTHER_KEYS: usize = 250_000;

/// A server of the test's own holding [`OTHER_KEYS`] keys that are not syncguard's (the shared
/// server must not be crowded: other tests list it with the default budget).
fn crowded_server() -> RedisServer {
    const _: () = assert!(OTHER_KEYS > 2 * DEFAULT_LIST_SCAN_BUDGET);
    let server = RedisServer::start();
    let mut conn = server.connection();
    let mut pipe = redis::pipe();
    for batch in 0..OTHER_KEYS / 1000 {
        let pairs: Vec<(String, &str)> = (0..1000)
            .map(|n| (format!("other:{}", batch * 1000 + n), "x"))
            .collect();
        pipe.mset(&pairs).ignore();
    }
    let () = pipe.query(&mut conn).expect("fill the crowded server");
    let size: usize = redis::cmd("DBSIZE").query(&mut conn).unwrap();
    assert_eq!(size, OTHER_KEYS);
    server
}

/// `url` with the query parameter `param` added.
fn with_param(url: &str, param: &str) -> String {
    let joint = if url.contains('?') { '&' } else { '?' };
    format!("{url}{joint}{param}")
}

/// The scan budget counts every key of the database, under the prefix or not: among many
/// other keys a default listing stops at its bound and says so, a key prefix of its own
/// (`?prefix=`) changes nothing, and the URL's `?list_scan_budget=` raised above the size of
/// the database lists the lock.
#[test]
fn a_lock_among_many_other_keys_is_listed_with_the_budget_the_url_raises() {
    let server = crowded_server();
    let prefix = unique("list-crowd");
    let key = format!("{prefix}:L000000");
    for url in [server.url(), format!("{}?prefix=crowd-own", server.url())] {
        let backend = patient_redis(&url).build().expect("connect to the server");
        let held = lease(backend.acquire(&key, TTL));
        let (_, coverage) = listed_keys(&backend, &prefix, MAX_LIST_LIMIT);
        assert_eq!(coverage, Coverage::WorkBoundReached, "{url}");

        let raised = patient_redis(&with_param(&url, "list_scan_budget=1000000"))
            .build()
            .expect("connect to the server");
        assert_eq!(
            listed_keys(&raised, &prefix, MAX_LIST_LIMIT),
            (vec![key.clone()], Coverage::Complete),
            "{url}"
        );
        // The builder's budget wins over the URL's.
        let narrowed = patient_redis(&with_param(&url, "list_scan_budget=1000000"))
            .list_scan_budget(10)
            .build()
            .expect("connect to the server");
        assert_eq!(
            listed_keys(&narrowed, &prefix, MAX_LIST_LIMIT).1,
            Coverage::WorkBoundReached
        );
        assert!(backend.release(&held.lock_id).unwrap());
    }
}

/// What `syncguard list` advises when it stops at Redis' bound works: following it lists the
/// lock, completely.
#[cfg(feature = "cli")]
#[test]
fn the_advice_of_a_partial_listing_lists_the_lock() {
    let server = crowded_server();
    let backend = patient_redis(&server.url())
        .build()
        .expect("connect to the server");
    let prefix = unique("list-advice");
    let key = format!("{prefix}:L000000");
    let held = lease(backend.acquire(&key, TTL));

    let partial = crate::cli::sg(&server.url(), &["list", "--prefix", &prefix, "--raw"]);
    partial.expect_code(0);
    assert!(
        partial.stderr.contains("may be missing")
            && partial
                .stderr
                .contains("raise the URL parameter list_scan_budget"),
        "{}",
        partial.context()
    );

    let advised = with_param(&server.url(), "list_scan_budget=1000000");
    let complete = crate::cli::sg(&advised, &["list", "--prefix", &prefix, "--raw"]);
    complete.expect_code(0);
    assert_eq!(
        complete.json()["key"],
        key.as_str(),
        "{}",
        complete.context()
    );
    assert_eq!(complete.stderr, "", "{}", complete.context());
    assert!(backend.release(&held.lock_id).unwrap());
}
