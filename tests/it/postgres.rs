//! The PostgreSQL backend against a real PostgreSQL cluster started by the tests: the contract
//! suites, the tables shared with the TypeScript SyncGuard, server time, races (including
//! against the TypeScript library's own transaction), and faults.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::thread;
use std::time::Duration;

use crate::support;
use crate::support::server_store::{PlantedLock, ServerStore, server_store_tests};
use crate::support::{
    PG_PASSWORD, PgServer, TTL, lease, postgres_now_ms, shared_postgres, shared_postgres_backend,
    shared_postgres_with_client, shared_postgres_with_tables, unique,
};
use syncguard::driver::{Driver, Key, LeaseRef, LockId, Ttl, generate_lock_id, make_storage_key};
use syncguard::postgres::{PostgresBackend, TableNames, setup_schema};
use syncguard::{AcquireOutcome, ErrorCode, Fence, LeaseKind, LockBackend, Lookup};

syncguard::backend_contract!(shared_postgres_backend);
syncguard::guard_contract!(shared_postgres_backend);
syncguard::semaphore_contract!(shared_postgres_backend);
syncguard::line_contract!(shared_postgres_backend);
syncguard::shared_contract!(shared_postgres_backend);
syncguard::multi_contract!(shared_postgres_backend);
syncguard::lost_answer_contract!(shared_postgres_backend);
syncguard::break_contract!(shared_postgres_backend);
syncguard::watch_contract!(shared_postgres_backend);
syncguard::leadership_contract!(shared_postgres_backend);

/// The capacity check of the shared mode (not in `shared_contract!`: once per store, not per
/// topology).
#[test]
fn a_thousand_readers_share_a_key() {
    syncguard::testing::capacity::a_thousand_readers_share_a_key(shared_postgres_backend());
}

// ---------------------------------------------------------------------------------------------
// Schema and storage format
// ---------------------------------------------------------------------------------------------

#[test]
fn setup_schema_creates_the_seed_tables_and_indexes_idempotently() {
    let backend = shared_postgres_backend();
    backend.setup_schema().unwrap();
    backend.setup_schema().unwrap();
    let mut client = shared_postgres().client();
    let columns: BTreeMap<String, (String, String)> = client
        .query(
            "SELECT table_name || '.' || column_name, data_type, is_nullable \
             FROM information_schema.columns \
             WHERE table_name IN ('syncguard_locks', 'syncguard_fence_counters')",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| (row.get(0), (row.get(1), row.get(2))))
        .collect();
    let expected = [
        ("syncguard_locks.key", "text", "NO"),
        ("syncguard_locks.lock_id", "text", "NO"),
        ("syncguard_locks.expires_at_ms", "bigint", "NO"),
        ("syncguard_locks.acquired_at_ms", "bigint", "NO"),
        ("syncguard_locks.fence", "text", "NO"),
        ("syncguard_locks.user_key", "text", "NO"),
        // syncguard's own, optional (tables the TypeScript SyncGuard created lack it).
        ("syncguard_locks.holder", "text", "YES"),
        ("syncguard_fence_counters.fence_key", "text", "NO"),
        ("syncguard_fence_counters.fence", "bigint", "NO"),
        ("syncguard_fence_counters.key_debug", "text", "YES"),
    ];
    assert_eq!(columns.len(), expected.len(), "{columns:?}");
    for (column, data_type, nullable) in expected {
        assert_eq!(
            columns.get(column),
            Some(&(data_type.to_owned(), nullable.to_owned())),
            "{column}"
        );
    }
    let indexes: Vec<String> = client
        .query(
            "SELECT indexdef FROM pg_indexes WHERE tablename = 'syncguard_locks' ORDER BY indexname",
            &[],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect();
    for (index, columns) in [
        ("UNIQUE INDEX idx_syncguard_locks_lock_id", "(lock_id)"),
        ("INDEX idx_syncguard_locks_expires", "(expires_at_ms)"),
        ("UNIQUE INDEX syncguard_locks_pkey", "(key)"),
    ] {
        assert!(
            indexes
                .iter()
                .any(|d| d.contains(index) && d.contains(columns)),
            "{index} on {columns}: {indexes:?}"
        );
    }
}

#[test]
fn rows_are_written_as_the_seed_specifies() {
    let (backend, mut client) = shared_postgres_with_client();
    let key = unique("row");
    let lease = lease(backend.acquire(&key, TTL));
    let row = client
        .query_one(
            "SELECT key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key \
             FROM syncguard_locks WHERE lock_id = $1",
            &[&lease.lock_id],
        )
        .unwrap();
    assert_eq!(
        row.get::<_, String>("key"),
        backend.storage_key(&key).unwrap()
    );
    assert_eq!(
        row.get::<_, String>("key"),
        key,
        "short keys are stored as they are"
    );
    assert_eq!(row.get::<_, i64>("expires_at_ms"), lease.expires_at_ms);
    assert_eq!(
        row.get::<_, i64>("acquired_at_ms"),
        lease.expires_at_ms - TTL.as_millis() as i64
    );
    assert_eq!(row.get::<_, String>("fence"), "000000000000001");
    assert_eq!(row.get::<_, String>("user_key"), key);
    let counter = client
        .query_one(
            "SELECT fence, key_debug FROM syncguard_fence_counters WHERE fence_key = $1",
            &[&format!("fence:{key}")],
        )
        .unwrap();
    assert_eq!(counter.get::<_, i64>(0), 1);
    assert_eq!(
        counter.get::<_, Option<String>>(1).as_deref(),
        Some(key.as_str())
    );
    assert!(backend.release(&lease.lock_id).unwrap());
}

#[test]
fn storage_keys_follow_the_shared_vectors() {
    let vectors: serde_json::Value =
        serde_json::from_str(include_str!("../data/storage_keys.json")).unwrap();
    let backend = shared_postgres_backend();
    let mut checked = 0;
    for vector in vectors["derived_keys"].as_array().unwrap() {
        let key = vector["key"].as_str().unwrap();
        assert_eq!(
            backend.storage_key(key).unwrap(),
            vector["postgres"]["key"].as_str().unwrap()
        );
        assert_eq!(
            backend.fence_key(key).unwrap(),
            vector["postgres"]["fence_key"].as_str().unwrap()
        );
        checked += 1;
    }
    assert!(checked > 0);
    // User keys stop at 512 bytes, so a 1700-byte storage key only arises for derived keys;
    // the algorithm is the one the vectors pin down.
    let long = "k".repeat(1701);
    assert_eq!(make_storage_key("", &long, 1700, 0).unwrap().len(), 22);
}

#[test]
fn custom_table_names_from_the_builder_and_the_url() {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let (locks, fences) = (format!("t_locks_{suffix}"), format!("t_fences_{suffix}"));
    let by_builder = PostgresBackend::builder()
        .url(shared_postgres().url())
        .table_name(&locks)
        .fence_table_name(&fences)
        .build()
        .unwrap();
    let key = unique("custom");
    let err = by_builder.acquire(&key, TTL).unwrap_err();
    // Not the caller's argument and not transient: the deployment needs its tables.
    assert_eq!(err.code(), ErrorCode::Internal);
    assert!(err.message().contains("run `syncguard setup`"), "{err}");
    assert!(err.message().contains("setup_schema"), "{err}");
    by_builder.setup_schema().unwrap();
    let held = lease(by_builder.acquire(&key, TTL));

    let by_url = syncguard::connect(&format!(
        "{}?table={locks}&fence_table={fences}",
        shared_postgres().url()
    ))
    .unwrap();
    assert!(
        by_url.is_locked(&key).unwrap(),
        "both see the same custom tables"
    );
    assert!(
        !shared_postgres_backend().is_locked(&key).unwrap(),
        "the default tables are others"
    );
    let mut client = shared_postgres().client();
    let rows: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {locks} WHERE lock_id = $1"),
            &[&held.lock_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(rows, 1);
    assert!(by_url.release(&held.lock_id).unwrap());

    let mut direct = shared_postgres().client();
    setup_schema(&mut direct, &TableNames::new(&locks, &fences).unwrap()).unwrap();
}

#[test]
fn table_name_injection_is_rejected_at_construction() {
    let url = shared_postgres().url();
    for bad in ["x; DROP TABLE syncguard_locks; --", "Locks", "a.b", "\"q\""] {
        let err = PostgresBackend::builder()
            .url(&url)
            .table_name(bad)
            .build()
            .unwrap_err();
        assert_eq!(err.code(), ErrorCode::InvalidArgument, "{bad}");
    }
    let err = syncguard::connect(&format!("{url}?fence_table=x%3BDROP%20TABLE%20y")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
    let err = PostgresBackend::builder()
        .url(&url)
        .table_name("same_table")
        .fence_table_name("same_table")
        .build()
        .unwrap_err();
    assert_eq!(err.code(), ErrorCode::InvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// The tables as another client sees them: the server's clock decides (the statements judge
// expiry by it), counter rows outlive their locks, and rows the TypeScript SyncGuard wrote are
// honoured
// ---------------------------------------------------------------------------------------------

server_store_tests!(
    support::patient_postgres,
    shared_postgres_with_tables(),
    client
);

/// The shared cluster as another client (the TypeScript SyncGuard) sees it: `clock_timestamp()`,
/// and the default tables.
impl ServerStore for postgres::Client {
    fn now_ms(&mut self) -> i64 {
        postgres_now_ms(self)
    }

    /// The lock's row and the key's counter row, as the TypeScript SyncGuard inserts them.
    fn write_lock(&mut self, lock: &PlantedLock) {
        self.execute(
            "INSERT INTO syncguard_locks (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) \
             VALUES ($1, $2, $3, $4, $5, $1)",
            &[
                &lock.key,
                &lock.lock_id,
                &lock.expires_at_ms,
                &lock.acquired_at_ms,
                &lock.fence_string(),
            ],
        )
        .unwrap();
        self.execute(
            "INSERT INTO syncguard_fence_counters (fence_key, fence, key_debug) VALUES ($1, $2, $3)",
            &[
                &format!("fence:{}", lock.key),
                &i64::try_from(lock.fence).unwrap(),
                &lock.key,
            ],
        )
        .unwrap();
    }

    fn lock_is_stored(&mut self, key: &str) -> bool {
        self.query_one(
            "SELECT EXISTS (SELECT 1 FROM syncguard_locks WHERE key = $1)",
            &[&key],
        )
        .unwrap()
        .get(0)
    }

    fn fence_counter(&mut self, key: &str) -> Option<i64> {
        self.query_opt(
            "SELECT fence FROM syncguard_fence_counters WHERE fence_key = $1",
            &[&format!("fence:{key}")],
        )
        .unwrap()
        .map(|row| row.get(0))
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile rows
// ---------------------------------------------------------------------------------------------

#[test]
fn rows_edited_by_hand_give_typed_errors() {
    let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
    let mut client = shared_postgres().client();
    client
        .batch_execute(&format!(
            "ALTER TABLE {locks} ALTER COLUMN fence DROP NOT NULL"
        ))
        .unwrap();
    let now = postgres_now_ms(&mut client);
    let (null_fence, bad_fence) = (unique("null-fence"), unique("bad-fence"));
    for (key, fence) in [(&null_fence, None), (&bad_fence, Some("not-a-fence"))] {
        client
            .execute(
                &format!(
                    "INSERT INTO {locks} (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) \
                     VALUES ($1, $2, $3, $4, $5, $1)"
                ),
                &[key, &generate_lock_id(), &(now + 60_000), &now, &fence],
            )
            .unwrap();
        // Not a SyncGuard record: an error naming the key from every operation, never
        // "locked" (postgres_errors.rs checks each operation and kind of damage).
        let err = backend.lookup(Lookup::Key(key)).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Internal, "{err}");
        assert_eq!(err.key(), Some(key.as_str()));
        assert_eq!(
            backend.is_locked(key).unwrap_err().code(),
            ErrorCode::Internal
        );
        assert_eq!(
            backend.acquire(key, TTL).unwrap_err().code(),
            ErrorCode::Internal
        );
    }
    // A lock id edited into something malformed cannot be addressed, and the row is reported.
    let key = unique("bad-id");
    client
        .execute(
            &format!(
                "INSERT INTO {locks} (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) \
                 VALUES ($1, 'not a lock id', $2, $3, '000000000000001', $1)"
            ),
            &[&key, &(now + 60_000), &now],
        )
        .unwrap();
    assert_eq!(
        backend.release("not a lock id").unwrap_err().code(),
        ErrorCode::InvalidArgument
    );
    let err = syncguard::get_by_key_raw(&backend, &key).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal, "{err}");
}

// ---------------------------------------------------------------------------------------------
// Races
// ---------------------------------------------------------------------------------------------

/// Many threads over two pools race for one fresh key per round (no counter row yet), then
/// for one key over and over: one winner per round, no duplicate fence 1, fences increasing.
#[test]
fn racing_acquires_over_two_pools() {
    let pools = [
        Arc::new(shared_postgres_backend()),
        Arc::new(shared_postgres_backend()),
    ];
    let threads = 8;
    let rounds = 15;
    let barrier = Barrier::new(threads);
    let winners = Mutex::new(Vec::new());
    // Problems are recorded, not panicked on: a panic would strand the others at the barrier.
    let problems = Mutex::new(Vec::new());
    let fresh_keys: Vec<String> = (0..rounds).map(|r| unique(&format!("fresh-{r}"))).collect();
    let hot_key = unique("hot");
    thread::scope(|scope| {
        for t in 0..threads {
            let backend = Arc::clone(&pools[t % 2]);
            let (barrier, winners, problems, fresh_keys, hot_key) =
                (&barrier, &winners, &problems, &fresh_keys, &hot_key);
            scope.spawn(move || {
                let record = |e: syncguard::LockError| problems.lock().unwrap().push(e.to_string());
                for (round, key) in fresh_keys.iter().enumerate() {
                    barrier.wait();
                    match backend.acquire(key, TTL) {
                        Ok(AcquireOutcome::Acquired(lease)) => {
                            winners.lock().unwrap().push(("fresh", round, lease.fence))
                        }
                        Ok(AcquireOutcome::Locked) => {}
                        Err(e) => record(e),
                    }
                    barrier.wait();
                    let hot = match backend.acquire(hot_key, TTL) {
                        Ok(outcome) => outcome.lease(),
                        Err(e) => {
                            record(e);
                            None
                        }
                    };
                    if let Some(lease) = &hot {
                        winners.lock().unwrap().push(("hot", round, lease.fence));
                    }
                    // Everyone has tried before the winner lets go.
                    barrier.wait();
                    if let Some(lease) = hot
                        && let Err(e) = backend.release(&lease.lock_id)
                    {
                        record(e);
                    }
                    barrier.wait();
                }
            });
        }
    });
    assert_eq!(problems.into_inner().unwrap(), Vec::<String>::new());
    let winners = winners.into_inner().unwrap();
    for round in 0..rounds {
        let fresh: Vec<&Fence> = winners
            .iter()
            .filter(|(kind, r, _)| *kind == "fresh" && *r == round)
            .map(|(_, _, fence)| fence)
            .collect();
        assert_eq!(fresh.len(), 1, "round {round}: one winner for a fresh key");
        assert_eq!(
            fresh[0].value(),
            1,
            "round {round}: a fresh key starts at fence 1"
        );
    }
    let hot: Vec<u64> = winners
        .iter()
        .filter(|(kind, _, _)| *kind == "hot")
        .map(|(_, _, fence)| fence.value())
        .collect();
    assert_eq!(hot.len(), rounds, "one winner per round on the hot key");
    assert!(hot.windows(2).all(|pair| pair[0] < pair[1]), "{hot:?}");
}

/// The TypeScript SyncGuard's acquire, statement by statement (BEGIN, advisory lock, read,
/// counter insert + increment, unconditional upsert, COMMIT), replayed with a raw client.
fn typescript_acquire(
    client: &mut postgres::Client,
    key: &str,
    ttl_ms: i64,
) -> Result<Option<String>, postgres::Error> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&key])?;
    let now: i64 = tx
        .query_one(
            "SELECT floor(extract(epoch FROM now()) * 1000)::bigint",
            &[],
        )?
        .get(0);
    let existing = tx.query_opt(
        "SELECT expires_at_ms FROM syncguard_locks WHERE key = $1",
        &[&key],
    )?;
    if existing.is_some_and(|row| row.get::<_, i64>(0) > now - 1000) {
        return Ok(None);
    }
    let fence_key = format!("fence:{key}");
    tx.execute(
        "INSERT INTO syncguard_fence_counters (fence_key, fence, key_debug) VALUES ($1, 0, $2) \
         ON CONFLICT (fence_key) DO NOTHING",
        &[&fence_key, &key],
    )?;
    let fence: i64 = tx
        .query_one(
            "UPDATE syncguard_fence_counters SET fence = fence + 1 WHERE fence_key = $1 RETURNING fence",
            &[&fence_key],
        )?
        .get(0);
    let lock_id = generate_lock_id();
    tx.execute(
        "INSERT INTO syncguard_locks (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) \
         VALUES ($1, $2, $3, $4, $5, $1) ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id, \
         expires_at_ms = EXCLUDED.expires_at_ms, acquired_at_ms = EXCLUDED.acquired_at_ms, \
         fence = EXCLUDED.fence, user_key = EXCLUDED.user_key",
        &[&key, &lock_id, &(now + ttl_ms), &now, &format!("{fence:015}")],
    )?;
    tx.commit()?;
    Ok(Some(lock_id))
}

/// The TypeScript SyncGuard's server clock, as it reads it (`EXTRACT(EPOCH FROM NOW()) * 1000`,
/// then `Math.floor(Number(…))`).
fn typescript_now_ms(client: &mut impl postgres::GenericClient) -> i64 {
    let now: String = client
        .query_one(
            "SELECT (EXTRACT(EPOCH FROM NOW()) * 1000)::text AS now_ms",
            &[],
        )
        .unwrap()
        .get(0);
    now.parse::<f64>().unwrap().floor() as i64
}

/// What the TypeScript SyncGuard's lookup reads (v2.5, `postgres/operations/lookup.ts`): the
/// columns it names, of the row `column = value`, if live by the server's clock.
#[derive(Debug, PartialEq, Eq)]
struct TypescriptLockInfo {
    lock_id: String,
    expires_at_ms: i64,
    acquired_at_ms: i64,
    key: String,
    fence: String,
}

fn typescript_lookup(
    client: &mut postgres::Client,
    locks: &str,
    column: &str,
    value: &str,
) -> Option<TypescriptLockInfo> {
    let now_ms = typescript_now_ms(client);
    let row = client
        .query_opt(
            &format!(
                "SELECT key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key \
                 FROM {locks} WHERE {column} = $1"
            ),
            &[&value],
        )
        .unwrap()?;
    let info = TypescriptLockInfo {
        lock_id: row.get("lock_id"),
        expires_at_ms: row.get("expires_at_ms"),
        acquired_at_ms: row.get("acquired_at_ms"),
        key: row.get("user_key"),
        fence: row.get("fence"),
    };
    (info.expires_at_ms > now_ms - 1000).then_some(info)
}

/// The TypeScript SyncGuard's release (`ttl_ms` `None`) or extend, statement by statement
/// (v2.5, `postgres/operations/release.ts`, `extend.ts`): in one transaction, the server's
/// clock, `SELECT * … WHERE lock_id = $1 FOR UPDATE`, the ownership and liveness checks, then
/// `DELETE … WHERE key` or `UPDATE … SET expires_at_ms … WHERE key`. Whether it applied.
fn typescript_release_or_extend(
    client: &mut postgres::Client,
    locks: &str,
    lock_id: &str,
    ttl_ms: Option<i64>,
) -> bool {
    let mut tx = client.transaction().unwrap();
    let now_ms = typescript_now_ms(&mut tx);
    let Some(row) = tx
        .query_opt(
            &format!("SELECT * FROM {locks} WHERE lock_id = $1 FOR UPDATE"),
            &[&lock_id],
        )
        .unwrap()
    else {
        return false;
    };
    let (key, stored_id, expires_at_ms): (String, String, i64) =
        (row.get("key"), row.get("lock_id"), row.get("expires_at_ms"));
    if stored_id != lock_id || expires_at_ms <= now_ms - 1000 {
        return false;
    }
    match ttl_ms {
        None => tx
            .execute(&format!("DELETE FROM {locks} WHERE key = $1"), &[&key])
            .unwrap(),
        Some(ttl_ms) => tx
            .execute(
                &format!("UPDATE {locks} SET expires_at_ms = $1 WHERE key = $2"),
                &[&(now_ms + ttl_ms), &key],
            )
            .unwrap(),
    };
    tx.commit().unwrap();
    true
}

/// A lock we take with a holder description (tables and functions from `setup`) is the
/// TypeScript SyncGuard's to read, renew and release with its own statements; its renewal
/// keeps the description.
#[test]
fn the_typescript_library_reads_renews_and_releases_locks_with_a_holder() {
    let (backend, mut client) = shared_postgres_with_client();
    let key = unique("holder-to-node");
    let held = support::lease_held_by(&backend, &key, support::ODD_HOLDER);
    assert_eq!(
        syncguard::get_by_key(&backend, &key)
            .unwrap()
            .unwrap()
            .holder
            .as_deref(),
        Some(support::ODD_HOLDER)
    );
    let storage_key = backend.storage_key(&key).unwrap();
    let by_key = typescript_lookup(&mut client, "syncguard_locks", "key", &storage_key);
    let by_id = typescript_lookup(&mut client, "syncguard_locks", "lock_id", &held.lock_id);
    assert_eq!(by_key, by_id);
    let seen = by_key.expect("the TypeScript lookup finds the lock");
    assert_eq!(seen.lock_id, held.lock_id);
    assert_eq!(seen.key, key);
    assert_eq!(seen.fence, held.fence.to_string());
    assert_eq!(seen.expires_at_ms, held.expires_at_ms);

    assert!(typescript_release_or_extend(
        &mut client,
        "syncguard_locks",
        &held.lock_id,
        Some(60_000)
    ));
    let info = syncguard::get_by_id(&backend, &held.lock_id)
        .unwrap()
        .unwrap();
    assert!(info.expires_at_ms > held.expires_at_ms);
    assert_eq!(
        info.holder.as_deref(),
        Some(support::ODD_HOLDER),
        "the TypeScript renewal keeps the holder"
    );

    assert!(typescript_release_or_extend(
        &mut client,
        "syncguard_locks",
        &held.lock_id,
        None
    ));
    assert!(!backend.is_locked(&key).unwrap());
    assert!(!backend.release(&held.lock_id).unwrap());
}

/// The TypeScript SyncGuard taking a key over from an expired lock of ours writes every column
/// but `holder`: the description left in the row is not its lock's, and reads as none.
#[test]
fn a_typescript_lock_after_ours_has_no_holder() {
    let (backend, mut client) = shared_postgres_with_client();
    let key = unique("holder-then-node");
    let short = support::expired_lease_held_by(&backend, &key, "the one before");
    let lock_id = typescript_acquire(&mut client, &key, 30_000)
        .unwrap()
        .expect("the TypeScript acquire takes the expired key");
    let info = syncguard::get_by_key_raw(&backend, &key).unwrap().unwrap();
    assert_eq!(info.lock_id, lock_id);
    assert!(info.info.fence > short.fence);
    assert_eq!(info.info.holder, None, "{info:?}");
    assert_eq!(
        syncguard::get_by_id(&backend, &lock_id)
            .unwrap()
            .unwrap()
            .holder,
        None
    );
    assert!(backend.release(&lock_id).unwrap());
}

/// Tables the TypeScript SyncGuard created (its `setupSchema`: no `holder` column, no server
/// functions) keep working: a holder given is not stored, lookups say none, its rows are read
/// and released; `setup` then adds the column, and holders are stored from then on.
#[test]
fn tables_the_typescript_library_created_keep_working_without_holders() {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let (locks, fences) = (format!("ts_locks_{suffix}"), format!("ts_fences_{suffix}"));
    let mut client = shared_postgres().client();
    support::create_typescript_tables(&mut client, &locks, &fences);
    let backend = support::patient_postgres(&shared_postgres().url())
        .table_name(&locks)
        .fence_table_name(&fences)
        .build()
        .unwrap();

    let key = unique("holder-on-ts-tables");
    let ours = support::lease_held_by(&backend, &key, "not kept here");
    let info = syncguard::get_by_id(&backend, &ours.lock_id)
        .unwrap()
        .unwrap();
    assert_eq!(info.holder, None);
    assert_eq!(
        syncguard::get_by_key(&backend, &key).unwrap().unwrap(),
        info
    );
    assert!(typescript_lookup(&mut client, &locks, "lock_id", &ours.lock_id).is_some());
    assert!(typescript_release_or_extend(
        &mut client,
        &locks,
        &ours.lock_id,
        None
    ));
    assert!(!backend.is_locked(&key).unwrap());

    // A row as the TypeScript SyncGuard writes it: read (no holder) and released by us.
    let now = postgres_now_ms(&mut client);
    let (their_key, their_id) = (unique("ts-row"), generate_lock_id());
    client
        .execute(
            &format!(
                "INSERT INTO {locks} (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) \
                 VALUES ($1, $2, $3, $4, '000000000000003', $1)"
            ),
            &[&their_key, &their_id, &(now + 30_000), &now],
        )
        .unwrap();
    let theirs = syncguard::get_by_key_raw(&backend, &their_key)
        .unwrap()
        .unwrap();
    assert_eq!(theirs.lock_id, their_id);
    assert_eq!(theirs.info.holder, None);
    assert!(backend.release(&their_id).unwrap());

    // `setup` adds the column (and the functions): holders are stored from then on.
    backend.setup_schema().unwrap();
    let with_holder = support::lease_held_by(&backend, &key, "kept now");
    assert_eq!(
        syncguard::get_by_id(&backend, &with_holder.lock_id)
            .unwrap()
            .unwrap()
            .holder
            .as_deref(),
        Some("kept now")
    );
    assert!(typescript_release_or_extend(
        &mut client,
        &locks,
        &with_holder.lock_id,
        None
    ));
    client
        .batch_execute(&format!("DROP TABLE {locks}; DROP TABLE {fences};"))
        .unwrap();
}

/// A mixed fleet: Rust acquirers and TypeScript-style acquirers race on the same keys. Each
/// round has exactly one holder, and the fences both sides issue keep growing.
#[test]
fn mixed_fleet_with_the_typescript_library_never_double_grants() {
    let backend = Arc::new(shared_postgres_backend());
    let rounds = 20;
    let keys: Vec<String> = (0..rounds).map(|r| unique(&format!("mixed-{r}"))).collect();
    let barrier = Barrier::new(4);
    let wins = AtomicUsize::new(0);
    let holders = Mutex::new(BTreeMap::new());
    // Threads record problems instead of panicking: a panic would leave the others waiting at
    // the barrier forever.
    let problems = Mutex::new(Vec::new());
    thread::scope(|scope| {
        for side in 0..4 {
            let (backend, keys, barrier, wins, holders, problems) =
                (&backend, &keys, &barrier, &wins, &holders, &problems);
            scope.spawn(move || {
                let mut client = shared_postgres().client();
                for key in keys {
                    barrier.wait();
                    let won = if side % 2 == 0 {
                        backend
                            .acquire(key, TTL)
                            .map(|outcome| outcome.lease().map(|l| l.lock_id))
                            .map_err(|e| e.to_string())
                    } else {
                        typescript_acquire(&mut client, key, 30_000).map_err(|e| e.to_string())
                    };
                    match won {
                        Ok(Some(lock_id)) => {
                            wins.fetch_add(1, Ordering::SeqCst);
                            if holders
                                .lock()
                                .unwrap()
                                .insert(key.clone(), lock_id)
                                .is_some()
                            {
                                problems
                                    .lock()
                                    .unwrap()
                                    .push(format!("two holders of {key}"));
                            }
                        }
                        Ok(None) => {}
                        Err(error) => problems.lock().unwrap().push(error),
                    }
                }
            });
        }
    });
    assert_eq!(problems.into_inner().unwrap(), Vec::<String>::new());
    assert_eq!(
        wins.load(Ordering::SeqCst),
        rounds,
        "exactly one winner per key"
    );
    // Whoever won, the row is the winner's, and the next acquisition gets a higher fence. (A
    // losing Rust acquire may have consumed a number: fences grow, they need not be contiguous.)
    for (key, lock_id) in holders.into_inner().unwrap() {
        let held = syncguard::get_by_id(backend.as_ref(), &lock_id)
            .unwrap()
            .expect("held");
        assert!(backend.release(&lock_id).unwrap());
        let next = lease(backend.acquire(&key, TTL));
        assert!(
            next.fence > held.fence,
            "{key}: {:?} after {:?}",
            next.fence,
            held.fence
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Faults, each on a cluster of its own
// ---------------------------------------------------------------------------------------------

#[test]
fn faults_stopped_restarted_wrong_password() {
    let mut server = PgServer::start();
    let backend = Arc::new(support::impatient_postgres(&server.url()).build().unwrap());
    backend.setup_schema().unwrap();
    let key = unique("fault");
    let held = lease(backend.acquire(&key, TTL));

    // Stopped: typed errors, bounded waits.
    server.stop();
    for _ in 0..2 {
        let (backend, key) = (Arc::clone(&backend), key.clone());
        support::unavailable_within_a_minute(move || backend.is_locked(&key));
    }
    let url = server.url();
    support::unavailable_within_a_minute(move || PostgresBackend::connect(&url));

    // Restarted: PostgreSQL keeps its data, so the lock is still held, and the next call works.
    server.restart();
    assert!(backend.is_locked(&key).unwrap());
    assert!(syncguard::owns(backend.as_ref(), &held.lock_id).unwrap());
    assert!(backend.release(&held.lock_id).unwrap());

    // Wrong password.
    let wrong = server.url().replace(PG_PASSWORD, "not-the-password");
    let err = PostgresBackend::connect(&wrong).unwrap_err();
    assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
    assert!(!format!("{err} {err:?}").contains("not-the-password"));
    assert!(!format!("{backend:?}").contains(PG_PASSWORD));
}

#[test]
fn tls_required_against_a_plain_server_is_a_typed_error() {
    let url = format!("{}?sslmode=require", shared_postgres().url());
    let err = PostgresBackend::connect(&url).unwrap_err();
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    assert!(!err.to_string().contains(PG_PASSWORD));
}

#[test]
fn an_application_pool_works_and_exhaustion_is_rate_limited() {
    let config: postgres::Config = shared_postgres().url().parse().unwrap();
    let pool = support::pool_of_one(r2d2_postgres::PostgresConnectionManager::new(
        config,
        postgres::NoTls,
    ));
    let backend = PostgresBackend::builder()
        .pool(pool.clone())
        .build()
        .unwrap();
    backend.setup_schema().unwrap();
    support::exhausted_pool_is_rate_limited(&backend, pool.get().unwrap());
}

// ---------------------------------------------------------------------------------------------
// Called from inside async runtimes: blocks the calling thread, never panics
// ---------------------------------------------------------------------------------------------

/// Everything a lock user does, including building and dropping the backend, a guard's `Drop`
/// and `with_lock`.
fn lock_user_session(backend: PostgresBackend) {
    let key = unique("async");
    support::assert_lock_cycle(&backend, &key);
    let locker = syncguard::Locker::new(backend);
    let guard = locker.lock(&key).unwrap();
    assert!(guard.extend(TTL).unwrap());
    drop(guard);
    assert_eq!(locker.with_lock(&key, |g| g.key().to_owned()).unwrap(), key);
    drop(locker);
}

fn multi_thread_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn no_panic_inside_block_on() {
    shared_postgres_with_tables(); // outside the runtime
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async { lock_user_session(shared_postgres_backend()) });
}

#[test]
fn no_panic_on_a_tokio_main_style_worker() {
    shared_postgres_with_tables();
    // As `#[tokio::main]` does: a multi-thread runtime, the program's work in a task on it.
    let runtime = multi_thread_runtime();
    runtime
        .block_on(async {
            tokio::spawn(async { lock_user_session(shared_postgres_backend()) }).await
        })
        .unwrap();
}

#[test]
fn no_panic_from_spawn_blocking() {
    shared_postgres_with_tables();
    let runtime = multi_thread_runtime();
    runtime
        .block_on(async {
            tokio::task::spawn_blocking(|| lock_user_session(shared_postgres_backend())).await
        })
        .unwrap();
}

#[test]
fn no_panic_with_an_application_pool_inside_a_runtime() {
    shared_postgres_with_tables();
    // The application built its pool outside (the blocking client cannot connect inside a
    // runtime) and gave it away: the backend holds its last handle, so dropping the backend
    // inside the runtime closes the blocking clients there too.
    let config: postgres::Config = shared_postgres().url().parse().unwrap();
    let pool = r2d2::Pool::builder()
        .max_size(2)
        .build(r2d2_postgres::PostgresConnectionManager::new(
            config,
            postgres::NoTls,
        ))
        .unwrap();
    let backend = PostgresBackend::builder().pool(pool).build().unwrap();
    multi_thread_runtime()
        .block_on(async move { tokio::spawn(async move { lock_user_session(backend) }).await })
        .unwrap();
}

// ---------------------------------------------------------------------------------------------
// Errors that say what and where: each bad input and the message it gets
// ---------------------------------------------------------------------------------------------

#[test]
fn bad_inputs_and_their_messages() {
    // The default tables exist, so only the custom ones below are missing.
    let server = shared_postgres_with_tables();
    let refused_port = support::free_port();
    // URL parameters refused before connecting: (what, parameter, message).
    let bad_parameters = [
        (
            "unknown parameter",
            "tabel=x",
            "unknown PostgreSQL URL parameter `tabel` (did you mean `table`?)",
        ),
        (
            "empty parameter",
            "table=",
            "the PostgreSQL URL parameter `table` is empty",
        ),
        ("bad sslmode", "sslmode=sometimes", "unknown sslmode"),
        ("not a table name", "table=Locks", "invalid lock table name"),
    ];
    let mut cases: Vec<(&str, String, ErrorCode, String)> = bad_parameters
        .iter()
        .map(|&(name, parameter, message)| {
            let url = format!("{}?{parameter}", server.url());
            (name, url, ErrorCode::InvalidArgument, message.to_owned())
        })
        .collect();
    // Refused by the server or on the way to it: the message names where, and why.
    let port = server.port;
    let url = |credentials: &str, database: &str| {
        format!("postgres://{credentials}@127.0.0.1:{port}/{database}")
    };
    let with_password = format!("syncguard:{PG_PASSWORD}");
    cases.extend([
        (
            "connection refused",
            format!("postgres://{with_password}@127.0.0.1:{refused_port}/postgres"),
            ErrorCode::ServiceUnavailable,
            format!("PostgreSQL at 127.0.0.1:{refused_port}/postgres: connection refused"),
        ),
        (
            "name not resolved",
            format!("postgres://{with_password}@nonexistent.invalid:5432/postgres"),
            ErrorCode::ServiceUnavailable,
            "PostgreSQL at nonexistent.invalid:5432/postgres: host name not resolved".into(),
        ),
        (
            "TLS against a plain server",
            format!("{}?sslmode=require", server.url()),
            ErrorCode::ServiceUnavailable,
            format!(
                "PostgreSQL at 127.0.0.1:{port}/postgres: TLS handshake failed: server does not \
                 support TLS"
            ),
        ),
        (
            "wrong password",
            url("syncguard:not-the-password", "postgres"),
            ErrorCode::AuthFailed,
            format!(
                "PostgreSQL at 127.0.0.1:{port}/postgres: password authentication failed for \
                 user \"syncguard\" (SQLSTATE 28P01)"
            ),
        ),
        (
            "no password",
            url("syncguard", "postgres"),
            ErrorCode::AuthFailed,
            "the server asks for a password and the URL gives none".into(),
        ),
        (
            "missing database",
            url(&with_password, "no_such_db"),
            ErrorCode::Internal,
            format!(
                "PostgreSQL at 127.0.0.1:{port}/no_such_db: database \"no_such_db\" does not \
                 exist (SQLSTATE 3D000): check the database name in the URL"
            ),
        ),
    ]);
    for (name, url, code, expected) in &cases {
        let err = PostgresBackend::connect(url).expect_err(name);
        assert_eq!(err.code(), *code, "{name}: {err}");
        assert!(err.message().contains(expected.as_str()), "{name}: {err}");
        for secret in [PG_PASSWORD, "not-the-password"] {
            assert!(!err.to_string().contains(secret), "{name}: {err}");
            assert!(!format!("{err:?}").contains(secret), "{name}: {err:?}");
        }
    }

    // Missing tables: found by the first operation, not by connecting.
    let missing = PostgresBackend::connect(&format!(
        "{}?table=absent_locks&fence_table=absent_fences",
        server.url()
    ))
    .unwrap();
    let err = missing.acquire(&unique("missing"), TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal, "{err}");
    assert!(
        err.message().starts_with(&format!(
            "PostgreSQL at 127.0.0.1:{}/postgres: the syncguard tables are missing or outdated: \
             run `syncguard setup`",
            server.port
        )),
        "{err}"
    );
    assert!(!err.code().is_transient());
}

// ---------------------------------------------------------------------------------------------
// Server functions: the statements with plans cached per server connection
// ---------------------------------------------------------------------------------------------

#[test]
fn operations_go_through_the_server_functions() {
    let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
    let key = unique("function");
    let held = lease(backend.acquire(&key, TTL));
    // Replace one function with an impostor: what the backend answers must come from it.
    let mut client = shared_postgres().client();
    client
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION {locks}_by_key_v8(text, bigint) RETURNS TABLE (key text, \
             lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key \
             text, holder text) LANGUAGE sql AS $$ SELECT $1, 'IMPOSTORIMPOSTORIMPOST', \
             4102444800000::bigint, 0::bigint, '000000000000042', 'impostor', 'an impostor' $$"
        ))
        .unwrap();
    let seen = syncguard::get_by_key_raw(&backend, &key).unwrap().unwrap();
    assert_eq!(seen.key, "impostor");
    assert_eq!(seen.info.fence.value(), 42);
    assert_eq!(seen.info.holder.as_deref(), Some("an impostor"));
    assert!(backend.release(&held.lock_id).unwrap());
}

#[test]
fn without_the_server_functions_the_statements_go_inline() {
    let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
    let mut client = shared_postgres().client();
    support::drop_server_functions(&mut client, &locks);
    // As a database set up by the TypeScript SyncGuard or an older syncguard: everything works.
    let key = unique("inline");
    let held = lease(backend.acquire(&key, TTL));
    assert!(backend.is_locked(&key).unwrap());
    assert!(backend.lookup(Lookup::Key(&key)).unwrap().is_some());
    assert!(backend.extend(&held.lock_id, TTL).unwrap().is_some());
    assert!(backend.release(&held.lock_id).unwrap());
    assert!(matches!(
        backend.acquire(&key, TTL).unwrap(),
        AcquireOutcome::Acquired(_)
    ));
    // setup_schema brings them back.
    backend.setup_schema().unwrap();
    let count: i64 = client
        .query_one(
            "SELECT count(*) FROM pg_proc WHERE proname LIKE $1",
            &[&format!("{locks}\\_%\\_v8")],
        )
        .unwrap()
        .get(0);
    assert_eq!(count, 22);
}

#[test]
fn a_statement_past_its_deadline_is_cancelled_on_the_server() {
    // The short deadline only for the call that must miss it: the others go through a patient
    // backend, so a loaded machine cannot make them miss it too.
    let patient = shared_postgres_backend();
    let backend = PostgresBackend::builder()
        .url(shared_postgres().url())
        .connect_timeout(support::PATIENT)
        .statement_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let key = unique("deadline");
    let held = lease(patient.acquire(&key, TTL));
    // Another session holds the row: the extend waits on its row lock past the deadline.
    let mut blocker = shared_postgres().client();
    let mut transaction = blocker.transaction().unwrap();
    transaction
        .query(
            "SELECT 1 FROM syncguard_locks WHERE lock_id = $1 FOR UPDATE",
            &[&held.lock_id],
        )
        .unwrap();
    let err = backend.extend(&held.lock_id, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(err.message().contains("cancel"), "{err}");
    // The server stops waiting too (a cancel request), while the row lock is still held: no
    // session of syncguard is left waiting for it.
    let mut observer = shared_postgres().client();
    let mut waiting = || -> i64 {
        observer
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'syncguard' \
                 AND wait_event_type = 'Lock' AND query LIKE '%extend%'",
                &[],
            )
            .unwrap()
            .get(0)
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while waiting() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the timed-out statement still waits on the server"
        );
        thread::sleep(Duration::from_millis(20));
    }
    transaction.rollback().unwrap();
    assert!(patient.release(&held.lock_id).unwrap());
}

/// A backend on tables of its own (created), for tests that change the tables' schema.
fn backend_on_fresh_tables(prefix: &str) -> (PostgresBackend, TableNames) {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let tables = TableNames::new(
        &format!("{prefix}_locks_{suffix}"),
        &format!("{prefix}_fences_{suffix}"),
    )
    .unwrap();
    let backend = PostgresBackend::builder()
        .url(shared_postgres().url())
        .table_name(tables.lock_table())
        .fence_table_name(tables.fence_table())
        .build()
        .unwrap();
    backend.setup_schema().unwrap();
    (backend, tables)
}

/// A process (re)installing the schema while others lock: its DDL takes table locks (`CREATE
/// INDEX` a share lock, `ALTER TABLE` an exclusive one), and one that held the first while it
/// waited for the second deadlocked (SQLSTATE 40P01) with lock calls that read the table, then
/// wrote it. Each round here removes an index, so every `setup_schema` has DDL to run; every
/// call of the workers and of the setup works.
#[test]
fn setup_schema_beside_running_locks_deadlocks_nothing() {
    let (setup, tables) = backend_on_fresh_tables("d");
    let backends = [
        Arc::new(backend_on_tables(&tables)),
        Arc::new(backend_on_tables(&tables)),
    ];
    let workers_left = AtomicUsize::new(4);
    let errors = Mutex::new(Vec::new());
    let setups = AtomicUsize::new(0);
    thread::scope(|scope| {
        for t in 0..4 {
            let backend = Arc::clone(&backends[t % 2]);
            let (errors, workers_left) = (&errors, &workers_left);
            scope.spawn(move || {
                let keys = [unique(&format!("ddl-{t}")), unique("ddl-shared")];
                for i in 0..150 {
                    let key = &keys[i % 2];
                    let result = backend.acquire(key, TTL).and_then(|outcome| {
                        let Some(lease) = outcome.lease() else {
                            return backend.is_locked(key).map(drop);
                        };
                        backend.extend(&lease.lock_id, TTL)?;
                        let (id, key_) = (LockId::new(&lease.lock_id)?, Key::new(key)?);
                        let renewal = [(LeaseRef::new(&id).with_key(&key_), Ttl::new(TTL)?)];
                        for renewed in backend.extend_leases(&renewal) {
                            let _ = renewed?;
                        }
                        backend.lookup(Lookup::Key(key))?;
                        backend.list("ddl-", LeaseKind::Lock, 10)?;
                        backend.release(&lease.lock_id).map(drop)
                    });
                    if let Err(error) = result {
                        errors.lock().unwrap().push(error.to_string());
                    }
                }
                workers_left.fetch_sub(1, Ordering::SeqCst);
            });
        }
        scope.spawn(|| {
            let mut client = shared_postgres().client();
            let drop_index = format!("DROP INDEX idx_{}_expires", tables.lock_table());
            while workers_left.load(Ordering::SeqCst) > 0 {
                client.batch_execute(&drop_index).unwrap();
                if let Err(error) = setup.setup_schema() {
                    errors
                        .lock()
                        .unwrap()
                        .push(format!("setup_schema: {error}"));
                    break;
                }
                setups.fetch_add(1, Ordering::SeqCst);
            }
        });
    });
    let errors = errors.into_inner().unwrap();
    assert!(
        setups.load(Ordering::SeqCst) > 0 && errors.is_empty(),
        "{} errors in {} setups beside the locks, e.g. {:?}",
        errors.len(),
        setups.load(Ordering::SeqCst),
        &errors[..errors.len().min(4)]
    );
}

fn backend_on_tables(tables: &TableNames) -> PostgresBackend {
    PostgresBackend::builder()
        .url(shared_postgres().url())
        .table_name(tables.lock_table())
        .fence_table_name(tables.fence_table())
        .build()
        .unwrap()
}

/// Table names that contain one another or a default name (`app_locks` beside
/// `syncguard_locks_fences`, the defaults' names swapped): setup creates exactly the tables
/// named, and a lock cycle works on them.
#[test]
fn names_that_contain_one_another_get_their_own_tables() {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    for (locks, fences) in [
        ("app_locks", "syncguard_locks_fences"),
        ("syncguard_fence_counters", "syncguard_locks"),
    ] {
        let tables =
            TableNames::new(&format!("{locks}_{suffix}"), &format!("{fences}_{suffix}")).unwrap();
        let backend = backend_on_tables(&tables);
        backend.setup_schema().unwrap();
        let mut client = shared_postgres().client();
        let mut made: Vec<String> = client
            .query(
                "SELECT relname::text FROM pg_class WHERE relkind = 'r' AND relname LIKE $1",
                &[&format!("%\\_{suffix}%")],
            )
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect();
        made.sort();
        let mut expected = vec![
            tables.lock_table().to_owned(),
            tables.fence_table().to_owned(),
            tables.semaphore_table(),
            tables.permit_table(),
            tables.line_table(),
            tables.shared_table(),
        ];
        expected.sort();
        assert_eq!(made, expected);

        let key = unique("names");
        let held = lease(backend.acquire(&key, TTL));
        assert!(backend.is_locked(&key).unwrap());
        let counter: i64 = client
            .query_one(
                &format!(
                    "SELECT fence FROM {} WHERE fence_key = $1",
                    tables.fence_table()
                ),
                &[&backend.fence_key(&key).unwrap()],
            )
            .unwrap()
            .get(0);
        assert_eq!(counter, held.fence.value() as i64);
        assert!(backend.release(&held.lock_id).unwrap());
        support::drop_tables(&tables);
    }
}

/// `setup_schema` at every start-up, as the docs invite, with a long transaction holding a lock
/// on the lock table (a lock call in progress, a `pg_dump`): when nothing is missing it changes
/// nothing, so it neither waits for that transaction nor queues the lock calls behind it.
#[test]
fn setup_schema_with_everything_installed_waits_for_no_transaction() {
    let (_, tables) = backend_on_fresh_tables("w");
    let mut holder = shared_postgres().client();
    let mut open = holder.transaction().unwrap();
    open.batch_execute(&format!(
        "LOCK TABLE {} IN ROW EXCLUSIVE MODE",
        tables.lock_table()
    ))
    .unwrap();
    let starting = PostgresBackend::builder()
        .url(shared_postgres().url())
        .table_name(tables.lock_table())
        .fence_table_name(tables.fence_table())
        .statement_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    starting.setup_schema().unwrap();
    let mut direct = shared_postgres().client();
    let mut in_transaction = direct.transaction().unwrap();
    in_transaction
        .batch_execute("SET LOCAL statement_timeout = '2s'")
        .unwrap();
    setup_schema(&mut in_transaction, &tables).unwrap();
    in_transaction.commit().unwrap();
    let key = unique("started");
    let held = lease(starting.acquire(&key, TTL));
    assert!(starting.release(&held.lock_id).unwrap());
    open.rollback().unwrap();
}
