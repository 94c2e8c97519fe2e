//! Renewals by the heartbeat through real Redis deployments: one `Locker` renews many guards in
//! one batch, and each guard must get its own lease's answer (a guard whose lock another
//! process took must be reported lost, and only such guards); and a Cluster process whose only
//! traffic is its renewals must find the new primary after a failover by itself.

use std::time::{Duration, Instant};

use syncguard::redis::{KeyLayout, RedisBackend};
use syncguard::{Heartbeat, LockBackend, LockGuard, LockOptions, Locker};

use crate::support::{
    RedisCluster, patient_redis, shared_cluster, shared_redis, shared_sentinels, unique,
};

/// Guards one `Locker` holds at once: their renewals go out in one batch.
const GUARDS: usize = 20;
/// Short leases, renewed every second (a third of the TTL).
const LEASE: Duration = Duration::from_secs(3);
/// The guards whose locks are released from outside; the first of them is taken by another
/// `Locker` as well. Spread over the batch, first and last included.
const RELEASED: [usize; 5] = [0, 3, 8, 13, GUARDS - 1];
/// Renewals every kept guard must make after the released ones were reported lost.
const RENEWALS_AFTER: usize = 2;

/// A hang guard for conditions that take about one renewal interval: generous for a loaded
/// machine.
const HANG_GUARD: Duration = Duration::from_secs(90);

/// Waits for `condition`; fails the test with `what` (and the state `describe` gives) if the
/// hang guard runs out.
fn await_condition(what: &str, mut condition: impl FnMut() -> bool, describe: impl Fn() -> String) {
    let deadline = Instant::now() + HANG_GUARD;
    while !condition() {
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}: {}",
            describe()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn states(guards: &[LockGuard]) -> String {
    guards
        .iter()
        .enumerate()
        .map(|(i, g)| format!("#{i}: {}", if g.is_lost() { "lost" } else { "held" }))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One `Locker` on `backend` holds [`GUARDS`] guards; the locks of [`RELEASED`] are released by
/// lock id through `outside`, and the first of them is then taken by a `Locker` on `thief`.
/// Exactly those guards must be reported lost (each by its own `is_lost()` and `check()`), the
/// stolen one never `Ok` once the thief holds the key, and every other guard must keep renewing.
fn exactly_the_released_guards_are_lost(
    backend: RedisBackend,
    outside: RedisBackend,
    thief: RedisBackend,
) {
    let locker = Locker::new(backend);
    let options = LockOptions::default().ttl(LEASE).heartbeat(Heartbeat::Auto);
    let keys: Vec<String> = (0..GUARDS).map(|n| unique(&format!("renew-{n}"))).collect();
    let guards: Vec<LockGuard> = keys
        .iter()
        .map(|key| locker.lock_with(key, &options).expect("acquire a free key"))
        .collect();
    // Every guard renewed at least once (as part of the batch) before anything is taken.
    let acquired: Vec<i64> = guards.iter().map(LockGuard::expires_at_ms).collect();
    await_condition(
        "a first renewal of every guard",
        || {
            guards
                .iter()
                .zip(&acquired)
                .all(|(g, &at)| g.is_lost() || g.expires_at_ms() > at)
        },
        || states(&guards),
    );
    assert!(
        guards.iter().all(|g| !g.is_lost()),
        "a healthy guard was reported lost: {}",
        states(&guards)
    );

    for &i in &RELEASED {
        assert!(
            outside
                .release(guards[i].lock_id())
                .expect("release by lock id"),
            "guard #{i}'s lock was held"
        );
    }
    let stolen = RELEASED[0];
    let thief = Locker::new(thief);
    let taken = thief
        .lock_with(&keys[stolen], &options)
        .expect("the thief takes the released key");
    assert!(taken.fence().value() > guards[stolen].fence().value());

    // The stolen guard, while another process holds its lock: lost at its next renewal, and
    // never `Ok` again.
    await_condition(
        "the stolen guard to be reported lost",
        || guards[stolen].check().is_err(),
        || states(&guards),
    );
    await_condition(
        "every released guard to be reported lost",
        || RELEASED.iter().all(|&i| guards[i].is_lost()),
        || states(&guards),
    );
    for &i in &RELEASED {
        let error = guards[i].check().expect_err("a released guard is lost");
        assert_eq!(
            error.code(),
            syncguard::ErrorCode::LockLost,
            "#{i}: {error}"
        );
    }

    // The others keep renewing: each renews RENEWALS_AFTER more times (or is lost, which fails
    // below), each with its own answer.
    let mut seen: Vec<(i64, usize)> = guards.iter().map(|g| (g.expires_at_ms(), 0)).collect();
    await_condition(
        "the kept guards to renew again",
        || {
            // Every guard looked at in every round (not `all`, which stops at the first
            // behind: the later ones' renewals would go unseen until it caught up).
            let renewed: Vec<bool> = guards
                .iter()
                .zip(seen.iter_mut())
                .enumerate()
                .map(|(i, (g, (last, count)))| {
                    if RELEASED.contains(&i) || g.is_lost() {
                        return true;
                    }
                    let now = g.expires_at_ms();
                    if now > *last {
                        *last = now;
                        *count += 1;
                    }
                    *count >= RENEWALS_AFTER
                })
                .collect();
            renewed.iter().all(|&done| done)
        },
        || states(&guards),
    );
    let lost: Vec<usize> = (0..GUARDS).filter(|&i| guards[i].is_lost()).collect();
    assert_eq!(
        lost,
        RELEASED.to_vec(),
        "exactly the released guards are lost: {}",
        states(&guards)
    );
    for (i, guard) in guards.iter().enumerate() {
        if !RELEASED.contains(&i) {
            guard
                .check()
                .unwrap_or_else(|e| panic!("kept guard #{i}: {e}"));
        }
    }
    taken.check().expect("the thief still holds the key");
    assert!(taken.release().expect("the thief releases"));
    for (i, guard) in guards.into_iter().enumerate() {
        let released = guard.release().expect("release");
        assert_eq!(released, !RELEASED.contains(&i), "guard #{i}");
    }
}

fn on(url: &str, layout: Option<KeyLayout>) -> RedisBackend {
    let builder = patient_redis(url);
    match layout {
        Some(layout) => builder.layout(layout),
        None => builder,
    }
    .build()
    .expect("connect to the test deployment")
}

/// One server, the TypeScript layout (the default): one pipeline of scripts for the batch.
#[test]
fn single_server_typescript_layout() {
    let url = shared_redis().url();
    exactly_the_released_guards_are_lost(on(&url, None), on(&url, None), on(&url, None));
}

/// One server, the cluster layout: a script and an index `PEXPIRE` per lease in the pipeline.
#[test]
fn single_server_cluster_layout() {
    let url = shared_redis().url();
    let layout = Some(KeyLayout::Cluster);
    exactly_the_released_guards_are_lost(on(&url, layout), on(&url, layout), on(&url, layout));
}

/// Behind Sentinels, the TypeScript layout (the default there).
#[test]
fn sentinel_typescript_layout() {
    let url = shared_sentinels().url();
    exactly_the_released_guards_are_lost(on(&url, None), on(&url, None), on(&url, None));
}

/// Behind Sentinels, the cluster layout.
#[test]
fn sentinel_cluster_layout() {
    let url = shared_sentinels().url();
    let layout = Some(KeyLayout::Cluster);
    exactly_the_released_guards_are_lost(on(&url, layout), on(&url, layout), on(&url, layout));
}

/// A Cluster: the batch spans nodes.
#[test]
fn cluster() {
    let url = shared_cluster().url();
    exactly_the_released_guards_are_lost(on(&url, None), on(&url, None), on(&url, None));
}

/// A Cluster process whose only traffic is its guard's renewals: the primary of the key's slot
/// is killed, a replica takes over, and the heartbeat's renewals alone must find it (refresh
/// the slot map, connect to the new primary) well within the lease. Nothing else goes through
/// the locker's backend meanwhile: another call could refresh the slot map for them.
#[test]
fn cluster_renewals_alone_recover_from_a_failover() {
    let mut cluster = RedisCluster::start();
    let key = unique("failover-renewals");
    let slot = cluster.key_slot(&KeyLayout::Cluster.lock_key("syncguard", &key).unwrap());
    let io = Duration::from_secs(1);
    let backend = RedisBackend::builder()
        .url(cluster.url())
        .connect_timeout(io)
        .read_timeout(io)
        .write_timeout(io)
        .build()
        .expect("connect to the test Cluster");
    let locker = Locker::new(backend);
    let options = LockOptions::default()
        .ttl(Duration::from_secs(30))
        .heartbeat(Heartbeat::Every(Duration::from_secs(1)));
    let guard = locker.lock_with(&key, &options).expect("acquire");
    let acquired = guard.expires_at_ms();
    await_condition(
        "a first renewal",
        || guard.is_lost() || guard.expires_at_ms() > acquired,
        || format!("lost: {}", guard.is_lost()),
    );

    let asked = cluster.nodes[0].port;
    let primary = cluster
        .primary_of(slot, asked)
        .expect("a primary serves the slot");
    let survivor = cluster
        .nodes
        .iter()
        .map(|n| n.port)
        .find(|&p| p != primary)
        .expect("another node");
    cluster.node_mut(primary).kill();
    cluster.await_condition("a replica to take over the slot", || {
        cluster
            .primary_of(slot, survivor)
            .is_some_and(|p| p != primary)
            && crate::support::cluster_info(survivor)
                .get("cluster_state")
                .map(String::as_str)
                == Some("ok")
    });
    // The last renewal before the kill: renewals fail while the slot has no primary.
    let before = guard.expires_at_ms();
    await_condition(
        "a renewal on the new primary (or the lease's end)",
        || guard.is_lost() || guard.expires_at_ms() > before,
        || format!("lost: {}", guard.is_lost()),
    );
    guard
        .check()
        .expect("the renewals found the new primary before the lease ended");
    assert!(guard.release().expect("release on the new primary"));
}
