//! A watch through failures (issue 42): a Redis server that restarts under it — the watch's
//! reads fail while it is down and are tried again without an error item, and once it is back
//! the watch reports the state it finds — and a watcher behind PgBouncer, which hears no
//! release notifications, still reporting every holder's end and the latest state.

use crate::support::{
    RedisServer, impatient_redis, patient_postgres, shared_pgbouncer, shared_postgres_backend,
    shared_postgres_with_tables, unique,
};
use syncguard::testing::support::{LONG_TTL, acquired, next_state};
use syncguard::{KeyState, LockBackend, Locker};

/// The fence of a `Held` state with one holder.
fn held_fence(state: &KeyState) -> Option<u64> {
    match state {
        KeyState::Held { holders } if holders.len() == 1 => Some(holders[0].fence.value()),
        _ => None,
    }
}

#[test]
fn a_watch_goes_on_through_a_redis_restart() {
    let mut server = RedisServer::start();
    let url = server.url();
    let connect = || impatient_redis(&url).build().expect("a Redis backend");
    let watcher = Locker::new(connect());
    let holder = connect();
    let key = unique("watch-restart");
    let mut watch = watcher.watch(&key).unwrap();
    assert_eq!(next_state(&mut watch, "before"), KeyState::Free);
    let before = acquired(&holder, &key, LONG_TTL);
    assert_eq!(
        held_fence(&next_state(&mut watch, "held")),
        Some(before.fence.value())
    );
    server.stop();
    // Every read fails while the server is down (a poll interval apart at most): none of
    // them is an item.
    let during = watch.next_timeout(syncguard::WATCH_POLL_INTERVAL * 3);
    assert!(
        during.is_none(),
        "an item while the store was down: {during:?}"
    );
    server.restart();
    let after = next_state(&mut watch, "after the restart");
    assert!(
        after.is_free(),
        "the restarted store holds nothing: {after:?}"
    );
    let holder = connect();
    let again = acquired(&holder, &key, LONG_TTL);
    assert_eq!(
        held_fence(&next_state(&mut watch, "held again")),
        Some(again.fence.value())
    );
    assert!(holder.release(&again.lock_id).unwrap());
    assert_eq!(next_state(&mut watch, "released"), KeyState::Released);
}

#[test]
fn a_watcher_behind_pgbouncer_reports_the_latest_state() {
    shared_postgres_with_tables();
    let pooled = patient_postgres(&shared_pgbouncer().url())
        .build()
        .expect("a PostgreSQL backend through PgBouncer");
    let watcher = Locker::new(pooled);
    let direct = shared_postgres_backend();
    let key = unique("watch-pgbouncer");
    let mut watch = watcher.watch(&key).unwrap();
    assert_eq!(next_state(&mut watch, "before"), KeyState::Free);
    for round in 0..3 {
        let lease = acquired(&direct, &key, LONG_TTL);
        let mut state = next_state(&mut watch, "held");
        while held_fence(&state) != Some(lease.fence.value()) {
            assert!(state.is_free(), "round {round}: {state:?}");
            state = next_state(&mut watch, "held");
        }
        assert!(direct.release(&lease.lock_id).unwrap());
        assert_eq!(
            next_state(&mut watch, "released"),
            KeyState::Released,
            "round {round}: a release no notification told of"
        );
    }
    let last = acquired(&direct, &key, LONG_TTL);
    assert_eq!(
        held_fence(&next_state(&mut watch, "the last holder")),
        Some(last.fence.value())
    );
    assert!(direct.release(&last.lock_id).unwrap());
    assert_eq!(next_state(&mut watch, "the end"), KeyState::Released);
}
