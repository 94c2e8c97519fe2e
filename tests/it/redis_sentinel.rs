//! The Redis backend on a primary with a replica behind three Sentinels, started by the
//! tests: the contract suites in both key layouts, finding the primary again after a
//! failover, `READONLY` as a transient error, `min_replicas`, and a failover in the middle of
//! contention.

use std::time::Duration;

use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{ErrorCode, LockBackend};

use crate::support::failover::{FailoverRun, Topology};
use crate::support::redis_topology::connection;
use crate::support::{RedisSentinels, TTL, lease, shared_sentinels, unique};

fn sentinel_backend() -> RedisBackend {
    RedisBackend::connect(&shared_sentinels().url()).expect("connect through the test Sentinels")
}

syncguard::backend_contract!(sentinel_backend);
syncguard::guard_contract!(topology: sentinel_backend);
syncguard::semaphore_contract!(sentinel_backend);
syncguard::line_contract!(topology: sentinel_backend);
syncguard::shared_contract!(topology: sentinel_backend);
syncguard::multi_contract!(sentinel_backend);
syncguard::lost_answer_contract!(sentinel_backend);
syncguard::break_contract!(sentinel_backend);
syncguard::watch_contract!(sentinel_backend);
syncguard::leadership_contract!(sentinel_backend);

/// The cluster layout on a Sentinel deployment (what a deployment on its way to a Cluster
/// runs), through the contract suite too.
mod cluster_layout {
    use super::*;

    fn backend() -> RedisBackend {
        RedisBackend::builder()
            .url(shared_sentinels().url())
            .layout(KeyLayout::Cluster)
            .build()
            .expect("connect through the test Sentinels")
    }

    syncguard::backend_contract!(backend);
}

/// The URL's database, credentials and names are refused or used as given; a name the
/// Sentinels do not know is a configuration error, named.
#[test]
fn an_unknown_primary_name_is_refused() {
    let sentinels = shared_sentinels();
    let url = sentinels
        .url()
        .replace("/syncguard-test", "/no-such-primary");
    let err = RedisBackend::connect(&url).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument, "{err}");
    assert!(
        err.message().contains("knows no primary `no-such-primary`"),
        "{err}"
    );
}

/// A pooled connection to a server that was demoted answers `READONLY`: a transient error, and
/// the backend asks the Sentinels again; while they still name the demoted server, that is a
/// transient error too (it says it is a replica); once the deployment is whole, calls succeed.
/// The demotion is staged by hand for a moment (`REPLICAOF` on the primary), too short for the
/// Sentinels to react, and undone.
#[test]
fn readonly_is_transient_and_re_resolves() {
    let sentinels = RedisSentinels::start();
    let backend = RedisBackend::connect(&sentinels.url()).unwrap();
    let key = unique("readonly");
    assert!(
        backend
            .release(&lease(backend.acquire(&key, TTL)).lock_id)
            .unwrap()
    );
    let primary = sentinels.agreed_primary().unwrap();
    let replica = sentinels
        .data
        .iter()
        .map(|n| n.port)
        .find(|&p| p != primary)
        .unwrap();
    let replicaof = |port: u16, args: &[String]| {
        let mut conn = connection(port).unwrap();
        redis::cmd("REPLICAOF").arg(args).exec(&mut conn).unwrap();
    };
    replicaof(primary, &["127.0.0.1".to_owned(), replica.to_string()]);

    let err = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.message().contains("read-only replica"), "{err}");
    let err = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.message().contains("says it is a slave"), "{err}");

    replicaof(primary, &["NO".to_owned(), "ONE".to_owned()]);
    sentinels.await_healthy();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match backend.acquire(&key, TTL) {
            Ok(outcome) => {
                let lease = lease(Ok(outcome));
                assert!(backend.release(&lease.lock_id).unwrap());
                break;
            }
            Err(error) => {
                assert!(error.code().is_transient(), "{error}");
                assert!(std::time::Instant::now() < deadline, "{error}");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
    }
}

/// With `min_replicas=1` acquisitions wait for the replica; asking for two, of which there is
/// one, fails with a transient code and leaves the key free.
#[test]
fn min_replicas_waits_for_the_replica() {
    let url = shared_sentinels().url();
    let backend = RedisBackend::connect(&format!("{url}?min_replicas=1")).unwrap();
    let key = unique("replicated");
    let lease = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&lease.lock_id).unwrap());

    let demanding =
        RedisBackend::connect(&format!("{url}?min_replicas=2&replica_timeout=100ms")).unwrap();
    let err = demanding.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.message().contains("only 1 of the 2 replicas"), "{err}");
    assert!(!backend.is_locked(&key).unwrap(), "the lock was released");
}

/// The primary dies in the middle of contention; the Sentinels promote the replica; the dead
/// node comes back and follows it. With `min_replicas=1`: never two holders at once, fences
/// strictly grow, every error is a typed transient one, and operations resume.
#[test]
fn failover_in_the_middle_of_contention() {
    let mut sentinels = RedisSentinels::start();
    let key = unique("failover");
    let url = format!("{}?min_replicas=1&replica_timeout=500ms", sentinels.url());
    let observer = sentinels.url();
    FailoverRun::new(&url, &key).run(
        &observer,
        &mut SentinelFailover {
            sentinels: &mut sentinels,
            killed: None,
        },
    );
}

struct SentinelFailover<'a> {
    sentinels: &'a mut RedisSentinels,
    killed: Option<u16>,
}

impl Topology for SentinelFailover<'_> {
    fn kill_primary(&mut self) {
        let primary = self.sentinels.agreed_primary().expect("a primary");
        self.sentinels.data_node_mut(primary).kill();
        self.killed = Some(primary);
    }

    fn await_promotion(&mut self) {
        let killed = self.killed.expect("a primary was killed");
        let sentinels = &*self.sentinels;
        sentinels.await_condition("the Sentinels to promote the replica", || {
            sentinels.agreed_primary().is_some_and(|p| p != killed)
        });
    }

    fn restart_killed(&mut self) {
        let killed = self.killed.expect("a primary was killed");
        self.sentinels.data_node_mut(killed).start();
        // The Sentinels turn it into a replica of the new primary.
        self.sentinels.await_healthy();
    }
}

/// Why `min_replicas` exists, shown without timing luck: a primary whose replication stalls
/// (a proxy between it and its replica swallows the stream) and then dies. Without
/// `min_replicas` the acquisition it granted is lost with it: the promoted replica hands the
/// same fence out again, and lets a second holder in. With `min_replicas=1` that acquisition
/// fails (transient, the lock released), so no fence is handed out twice.
#[test]
fn without_min_replicas_a_failover_repeats_a_fence() {
    use crate::support::proxy::{FaultProxy, Mode};
    use crate::support::redis_topology::{Node, data_node_args};

    let mut primary = Node::new("redis-primary", data_node_args);
    primary.start();
    let proxy = FaultProxy::start(([127, 0, 0, 1], primary.port).into());
    let mut replica = Node::replica_of(proxy.port());
    replica.start();
    replica.await_replica_link();
    let on = |port: u16, query: &str| {
        RedisBackend::connect(&format!("redis://127.0.0.1:{port}/{query}")).unwrap()
    };
    let plain = on(primary.port, "");
    // Generous: on a loaded machine a healthy replica may take a while to acknowledge.
    let guarded = on(primary.port, "?min_replicas=1&replica_timeout=1500ms");
    let key = unique("lost-fence");

    // Replicated: fence 1, then released (the release reaches the replica before WAIT 1
    // confirms a later write).
    let first = lease(guarded.acquire(&key, TTL));
    assert_eq!(first.fence.value(), 1);
    assert!(guarded.release(&first.lock_id).unwrap());
    let mut conn = primary.connection();
    redis::cmd("SET")
        .arg(unique("marker"))
        .arg(1)
        .exec(&mut conn)
        .unwrap();
    let acknowledged: i64 = redis::cmd("WAIT")
        .arg(1)
        .arg(5000)
        .query(&mut conn)
        .unwrap();
    assert_eq!(acknowledged, 1);

    proxy.set_mode(Mode::BlackHole);
    // The guarded acquisition takes fence 2 on the primary alone: refused, and undone.
    let err = guarded.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(err.message().contains("only 0 of the 1 replicas"), "{err}");
    assert!(
        !plain.is_locked(&key).unwrap(),
        "the refused acquisition was released"
    );
    // The plain one takes fence 3 on the primary alone, and believes it holds the lock.
    let unreplicated = lease(plain.acquire(&key, TTL));
    assert_eq!(unreplicated.fence.value(), 3);

    // The primary dies; the replica, which never saw fences 2 and 3, takes over.
    primary.kill();
    let mut conn = replica.connection();
    redis::cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .exec(&mut conn)
        .unwrap();
    let promoted = on(replica.port, "");
    let second_holder = lease(promoted.acquire(&key, TTL));
    assert_eq!(
        second_holder.fence.value(),
        2,
        "fence 2 was never handed out: the refused acquisition kept it from anyone"
    );
    assert!(promoted.release(&second_holder.lock_id).unwrap());
    let repeated = lease(promoted.acquire(&key, TTL));
    assert_eq!(
        repeated.fence, unreplicated.fence,
        "without min_replicas, the fence of the lost acquisition is handed out again"
    );
}
