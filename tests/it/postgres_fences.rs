//! PostgreSQL fence counters edited into values no fence can follow (below 0, at or past the
//! limit): acquire fails with `Internal` naming the key, and writes nothing — no lock row, no
//! counter change — through the server functions and inline alike.

use crate::support::{self, TTL, lease, shared_postgres, unique};
use syncguard::driver::FENCE_MAX;
use syncguard::{ErrorCode, LockBackend};

/// The limit as the counter column holds it.
const LIMIT: i64 = FENCE_MAX as i64;

/// Plants `counter` for a fresh key, acquires it, and returns what acquire answered with the
/// lock rows and the counter found afterwards.
fn acquire_over_counter(
    backend: &syncguard::postgres::PostgresBackend,
    client: &mut postgres::Client,
    (locks, fences): (&str, &str),
    counter: i64,
) -> (
    String,
    syncguard::Result<syncguard::AcquireOutcome>,
    i64,
    i64,
) {
    let key = unique("fence-counter");
    let fence_key = backend.fence_key(&key).unwrap();
    client
        .execute(
            &format!("INSERT INTO {fences} (fence_key, fence, key_debug) VALUES ($1, $2, $3)"),
            &[&fence_key, &counter, &key],
        )
        .unwrap();
    let answer = backend.acquire(&key, TTL);
    let rows: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {locks} WHERE key = $1"),
            &[&backend.storage_key(&key).unwrap()],
        )
        .unwrap()
        .get(0);
    let after: i64 = client
        .query_one(
            &format!("SELECT fence FROM {fences} WHERE fence_key = $1"),
            &[&fence_key],
        )
        .unwrap()
        .get(0);
    (key, answer, rows, after)
}

#[test]
fn a_counter_no_fence_can_follow_fails_acquire_and_writes_nothing() {
    for inline in [false, true] {
        let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
        let fences = locks.replacen("t_locks_", "t_fences_", 1);
        let mut client = shared_postgres().client();
        if inline {
            support::drop_server_functions(&mut client, &locks);
        }
        for counter in [-5, -1, LIMIT, LIMIT + 1, i64::MAX] {
            let (key, answer, rows, after) =
                acquire_over_counter(&backend, &mut client, (&locks, &fences), counter);
            assert_eq!(rows, 0, "{counter} inline={inline}: a lock row was written");
            assert_eq!(after, counter, "inline={inline}: the counter was changed");
            let err = answer.unwrap_err();
            assert_eq!(
                err.code(),
                ErrorCode::Internal,
                "{counter} inline={inline}: {err}"
            );
            assert_eq!(err.key(), Some(key.as_str()), "{err}");
            assert!(
                err.message().contains(&counter.to_string()),
                "names the counter: {err}"
            );
        }
        // The last fences below the limit are still handed out, and a counter left at 0 (as a
        // counter row created but never incremented) gives fence 1.
        for (counter, fence) in [(LIMIT - 1, FENCE_MAX), (0, 1)] {
            let (_, answer, rows, after) =
                acquire_over_counter(&backend, &mut client, (&locks, &fences), counter);
            let held = lease(answer);
            assert_eq!(held.fence.value(), fence, "inline={inline}");
            assert_eq!((rows, after), (1, counter + 1), "inline={inline}");
            assert!(backend.release(&held.lock_id).unwrap());
        }
    }
}
