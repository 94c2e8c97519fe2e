//! PostgreSQL tables that this version's `setup` did not make (issue 30): made by the TypeScript
//! SyncGuard's own DDL (no `holder` column, no server functions, no semaphore tables), or by an
//! earlier syncguard's `setup` not run again (its `schema.sql`, kept under `postgres_legacy/`:
//! before holders and semaphores, and before semaphores). There, everything a lock can answer
//! works — lookups by key and by lock id, `list`, `status` — through the library and the
//! binary; a semaphore call is refused with `InvalidArgument` saying to run setup; and setup
//! brings the tables to this version, also where a function of this version's name differs
//! from this version's (an earlier syncguard's under the same name, or one altered by hand).
//! Waiting in line (issue 33) is off there, said once in the log, until setup adds it.

use crate::support::capture_log::capture;
use crate::support::{
    TTL, backend_on_fresh_tables, create_typescript_tables, drop_tables, lease, lease_held_by,
    patient_postgres, shared_postgres, unique,
};
use syncguard::driver::{
    Acquisition, Driver, DriverExt, Key, LeaseKind, Line, LockId, Request, Ttl, generate_lock_id,
};
use syncguard::postgres::{PostgresBackend, TableNames};
use syncguard::{ErrorCode, LockBackend, LockError};

/// Where the tables came from.
#[derive(Clone, Copy, Debug)]
enum Made {
    /// The TypeScript SyncGuard's `setupSchema`.
    ByTypeScript,
    /// An earlier syncguard: lock functions `_v3` returning no holder, no `holder` column, no
    /// listing function, no semaphores.
    BeforeHolders,
    /// An earlier syncguard: holders and listing, no semaphore tables or functions.
    BeforeSemaphores,
    /// An earlier syncguard (issue 33): semaphores and the line, functions `_v3`, no shared
    /// table and no `shared` column in the line.
    BeforeShared,
}

/// Tables of their own, made as `made` says, and a backend on them.
fn tables_made(made: Made) -> (PostgresBackend, TableNames) {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let tables = TableNames::new(
        &format!("lg_locks_{suffix}"),
        &format!("lg_fences_{suffix}"),
    )
    .expect("valid table names");
    let (locks, fences) = (tables.lock_table(), tables.fence_table());
    let mut client = shared_postgres().client();
    let earlier = |schema: &str| {
        // The earlier schema.sql, for these names (neither contains a default name nor the
        // other, so replacing the defaults is exact here).
        schema
            .replace("syncguard_fence_counters", fences)
            .replace("syncguard_locks", locks)
    };
    match made {
        Made::ByTypeScript => create_typescript_tables(&mut client, locks, fences),
        Made::BeforeHolders => client
            .batch_execute(&earlier(include_str!("postgres_legacy/before_holders.sql")))
            .expect("apply the earlier schema"),
        Made::BeforeSemaphores => client
            .batch_execute(&earlier(include_str!(
                "postgres_legacy/before_semaphores.sql"
            )))
            .expect("apply the earlier schema"),
        Made::BeforeShared => client
            .batch_execute(&earlier(include_str!("postgres_legacy/before_shared.sql")))
            .expect("apply the earlier schema"),
    }
    let backend = patient_postgres(&shared_postgres().url())
        .table_name(locks)
        .fence_table_name(fences)
        .build()
        .expect("a backend on the tables");
    (backend, tables)
}

/// The refusal of a semaphore call on tables without this version's semaphore functions.
#[track_caller]
fn assert_says_run_setup(error: LockError) {
    assert_refused_naming(error, "semaphores");
}

/// The refusal of a call of `feature` on tables without this version's functions for it.
#[track_caller]
fn assert_refused_naming(error: LockError, feature: &str) {
    assert_eq!(error.code(), ErrorCode::InvalidArgument, "{error}");
    for part in ["`syncguard setup`", "setup_schema", feature] {
        assert!(error.message().contains(part), "{part}: {error}");
    }
}

/// Shared holds (issue 34) need this version's functions: on tables without them every shared
/// call is refused with `InvalidArgument` naming `syncguard setup`, as semaphore calls are,
/// and the exclusive lock keeps working; setup brings shared holds, which then keep the
/// exclusive lock out.
fn shared_holds_are_refused_until_setup(made: Made) {
    let (backend, tables) = tables_made(made);
    let key = unique("legacy-shared");
    let held = lease_held_by(&backend, &key, "nightly job");
    let ((), _) = capture(|| {
        assert_refused_naming(
            backend
                .acquire_as(&key, syncguard::Mode::Shared, TTL)
                .unwrap_err(),
            "shared",
        );
        assert_refused_naming(
            backend.holders(&key, LeaseKind::Shared).unwrap_err(),
            "shared",
        );
        assert_refused_naming(
            backend.list(&key, LeaseKind::Shared, 10).unwrap_err(),
            "shared",
        );
        assert_refused_naming(
            backend
                .release_as(&key, LeaseKind::Shared, &held.lock_id)
                .unwrap_err(),
            "shared",
        );
        assert_refused_naming(
            backend
                .extend_as(&key, LeaseKind::Shared, &held.lock_id, TTL)
                .unwrap_err(),
            "shared",
        );
    });
    // The refusals switched nothing: the exclusive lock goes on as before.
    assert!(backend.extend(&held.lock_id, TTL).unwrap().is_some());
    assert!(backend.release(&held.lock_id).unwrap());
    let again = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&again.lock_id).unwrap());

    backend.setup_schema().unwrap();
    let reader = lease(backend.acquire_as(&key, syncguard::Mode::Shared, TTL));
    assert_eq!(backend.holders(&key, LeaseKind::Shared).unwrap().len(), 1);
    assert_eq!(
        backend.acquire(&key, TTL).unwrap(),
        syncguard::AcquireOutcome::Locked,
        "a reader keeps the writer out"
    );
    assert!(
        backend
            .release_as(&key, LeaseKind::Shared, &reader.lock_id)
            .unwrap()
    );
    let writer = lease(backend.acquire(&key, TTL));
    assert!(backend.release(&writer.lock_id).unwrap());
    drop_tables(&tables);
}

#[test]
fn on_tables_the_typescript_library_made_shared_holds_are_refused_until_setup() {
    shared_holds_are_refused_until_setup(Made::ByTypeScript);
}

#[test]
fn on_tables_set_up_before_shared_holds_they_are_refused_until_setup() {
    shared_holds_are_refused_until_setup(Made::BeforeShared);
}

/// Lookups, `is_locked`, `list` and the lock cycle work; semaphore calls say to run setup;
/// setup then brings semaphores and holders.
fn reads_work_and_setup_brings_the_rest(made: Made) {
    let (backend, tables) = tables_made(made);
    let key = unique("legacy");
    let held = lease_held_by(&backend, &key, "nightly job");
    let by_key = syncguard::get_by_key(&backend, &key).unwrap().unwrap();
    assert_eq!(
        syncguard::get_by_id(&backend, &held.lock_id).unwrap(),
        Some(by_key.clone())
    );
    assert_eq!(by_key.fence, held.fence);
    let listed = backend.list(&key, LeaseKind::Lock, 10).unwrap();
    assert_eq!(listed.locks, vec![by_key]);
    assert!(backend.is_locked(&key).unwrap());

    assert_says_run_setup(
        backend
            .acquire_as(&key, syncguard::Mode::permits(2).unwrap(), TTL)
            .unwrap_err(),
    );
    assert_says_run_setup(backend.holders(&key, LeaseKind::Permit).unwrap_err());
    assert_says_run_setup(backend.holders_raw(&key, LeaseKind::Permit).unwrap_err());
    assert_says_run_setup(backend.list(&key, LeaseKind::Permit, 10).unwrap_err());
    // The refusals switched nothing: the lock goes on as before.
    assert!(backend.extend(&held.lock_id, TTL).unwrap().is_some());
    assert!(backend.release(&held.lock_id).unwrap());

    backend.setup_schema().unwrap();
    let permit = lease(backend.acquire_as(&key, syncguard::Mode::permits(2).unwrap(), TTL));
    assert_eq!(backend.holders(&key, LeaseKind::Permit).unwrap().len(), 1);
    assert!(
        backend
            .release_as(&key, LeaseKind::Permit, &permit.lock_id)
            .unwrap()
    );
    let held = lease_held_by(&backend, &key, "nightly job");
    let info = syncguard::get_by_key(&backend, &key).unwrap().unwrap();
    assert_eq!(info.holder.as_deref(), Some("nightly job"));
    assert!(backend.release(&held.lock_id).unwrap());
    drop_tables(&tables);
}

#[test]
fn on_tables_the_typescript_library_made_reads_work_and_setup_brings_the_rest() {
    reads_work_and_setup_brings_the_rest(Made::ByTypeScript);
}

#[test]
fn on_tables_set_up_before_holders_reads_work_and_setup_brings_the_rest() {
    reads_work_and_setup_brings_the_rest(Made::BeforeHolders);
}

#[test]
fn on_tables_set_up_before_semaphores_reads_work_and_setup_brings_the_rest() {
    reads_work_and_setup_brings_the_rest(Made::BeforeSemaphores);
}

/// Without this version's functions and line table the line is off: a waiter's attempt barges
/// (refused while the key is held, granted once it is free, as before the line) and takes no
/// place, a single attempt is not held back, the line reads as empty, and leaving it does
/// nothing. The backend says so once in its log, however many calls find the functions
/// missing, naming `syncguard setup`, which adds the line: after it, a waiter takes a place.
fn without_the_line_waiters_barge_and_setup_adds_it(made: Made) {
    let (backend, tables) = tables_made(made);
    let key = unique("legacy-line");
    let checked = Key::new(&key).unwrap();
    let ttl = Ttl::new(TTL).unwrap();
    let place = LockId::generate();
    let wait = |place: &LockId| {
        backend
            .acquire_one(&Request::one(&checked, ttl).line(Line::Wait(place)))
            .unwrap()
    };
    let ((), records) = capture(|| {
        assert_eq!(backend.find_line(&checked, LeaseKind::Lock).unwrap(), []);
        let held = lease(backend.acquire(&key, TTL));
        assert_eq!(wait(&place), Acquisition::Locked);
        assert_eq!(backend.find_line(&checked, LeaseKind::Lock).unwrap(), []);
        assert!(backend.release(&held.lock_id).unwrap());
        // Had the waiter taken a place, this single attempt would be refused behind it.
        let single = backend.acquire_one(&Request::one(&checked, ttl)).unwrap();
        let Acquisition::Acquired { lease: single, .. } = single else {
            panic!("a single attempt is held back by a line these tables cannot have");
        };
        assert!(backend.release(&single.lock_id).unwrap());
        let Acquisition::Acquired { lease: waited, .. } = wait(&place) else {
            panic!("the waiter's attempt on the free key is refused");
        };
        backend
            .leave_line(&checked, LeaseKind::Lock, &place)
            .unwrap();
        assert!(backend.release(&waited.lock_id).unwrap());
    });
    let warnings: Vec<&str> = records
        .iter()
        .filter(|record| record.level == log::Level::Warn)
        .map(|record| record.message.as_str())
        .collect();
    assert_eq!(warnings.len(), 1, "one warning per backend: {warnings:?}");
    for part in ["`syncguard setup`", "line", "barge"] {
        assert!(warnings[0].contains(part), "{part}: {}", warnings[0]);
    }

    backend.setup_schema().unwrap();
    let held = lease(backend.acquire(&key, TTL));
    assert_eq!(wait(&place), Acquisition::Locked);
    let line = backend.find_line(&checked, LeaseKind::Lock).unwrap();
    assert_eq!(
        line.len(),
        1,
        "after setup a waiter takes a place: {line:?}"
    );
    backend
        .leave_line(&checked, LeaseKind::Lock, &place)
        .unwrap();
    assert_eq!(backend.find_line(&checked, LeaseKind::Lock).unwrap(), []);
    assert!(backend.release(&held.lock_id).unwrap());
    drop_tables(&tables);
}

#[test]
fn on_tables_the_typescript_library_made_waiters_barge_and_setup_adds_the_line() {
    without_the_line_waiters_barge_and_setup_adds_it(Made::ByTypeScript);
}

#[test]
fn on_tables_set_up_before_holders_waiters_barge_and_setup_adds_the_line() {
    without_the_line_waiters_barge_and_setup_adds_it(Made::BeforeHolders);
}

#[test]
fn on_tables_set_up_before_semaphores_waiters_barge_and_setup_adds_the_line() {
    without_the_line_waiters_barge_and_setup_adds_it(Made::BeforeSemaphores);
}

#[test]
fn on_tables_set_up_before_shared_holds_reads_work_and_setup_brings_the_rest() {
    reads_work_and_setup_brings_the_rest(Made::BeforeShared);
}

/// `pg_proc.prosrc` of the function `signature`.
fn source_of(signature: &str) -> String {
    shared_postgres()
        .client()
        .query_one(
            "SELECT prosrc FROM pg_proc WHERE oid = to_regprocedure($1)",
            &[&signature],
        )
        .expect("read the function's source")
        .get(0)
}

/// A lookup function replaced behind setup's back (same name, signature and result, another
/// body) answers for the real one until setup runs again; setup puts this version's back.
#[test]
fn setup_puts_back_a_function_replaced_behind_its_back() {
    let (backend, locks) = backend_on_fresh_tables(&shared_postgres().url());
    let key = unique("replaced");
    let held = lease_held_by(&backend, &key, "the real holder");
    let by_key = format!("{locks}_by_key_v8(text, bigint)");
    let original = source_of(&by_key);
    shared_postgres()
        .client()
        .batch_execute(&format!(
            "CREATE OR REPLACE FUNCTION {locks}_by_key_v8(text, bigint) RETURNS TABLE (key text, \
             lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key \
             text, holder text) LANGUAGE plpgsql AS $$ BEGIN RETURN QUERY SELECT $1, \
             'IMPOSTORIMPOSTORIMPOST'::text, 4102444800000::bigint, 0::bigint, \
             '000000000000042'::text, 'impostor'::text, 'an impostor'::text; END $$"
        ))
        .unwrap();
    let seen = syncguard::get_by_key_raw(&backend, &key).unwrap().unwrap();
    assert_eq!(seen.key, "impostor", "the replaced function answers");

    backend.setup_schema().unwrap();
    assert_eq!(source_of(&by_key), original);
    let seen = syncguard::get_by_key_raw(&backend, &key).unwrap().unwrap();
    assert_eq!(seen.lock_id, held.lock_id);
    assert_eq!(seen.info.holder.as_deref(), Some("the real holder"));
    assert!(backend.release(&held.lock_id).unwrap());
}

/// Through the binary: `status` (by key and by lock id) and `list` exit 0 on tables set up by
/// others; a semaphore command exits 2 saying to run setup; `syncguard setup` brings the rest,
/// and puts back a function replaced behind its back.
#[cfg(feature = "cli")]
mod binary {
    use serde_json::json;

    use super::*;
    use crate::cli::{expect_permits_in_status, json_lines, sg};

    fn url_of(tables: &TableNames) -> String {
        format!(
            "{}?table={}&fence_table={}",
            shared_postgres().url(),
            tables.lock_table(),
            tables.fence_table()
        )
    }

    fn status_and_list_exit_0(made: Made) {
        let (backend, tables) = tables_made(made);
        let url = url_of(&tables);
        let key = unique("legacy-cli");
        let held = lease(backend.acquire(&key, TTL));

        let status = sg(&url, &["status", "--raw", "--key", &key]);
        status.expect_code(0);
        assert_eq!(
            status.json()["lockId"],
            json!(held.lock_id),
            "{}",
            status.context()
        );
        assert_eq!(status.json().get("permits"), None, "{}", status.context());
        let by_id = sg(&url, &["status", "--raw", "--lock-id", &held.lock_id]);
        by_id.expect_json(0, &status.json());
        let listed = sg(&url, &["list", "--raw", "--prefix", &key]);
        listed.expect_code(0);
        assert_eq!(
            json_lines(&listed),
            vec![status.json()],
            "{}",
            listed.context()
        );

        for refused in [
            sg(&url, &["acquire", "--key", &key, "--permits", "2"]),
            sg(&url, &["list", "--permits", "--prefix", &key]),
        ] {
            refused.expect_error(2, "InvalidArgument");
            let says = refused.stderr.contains("`syncguard setup`");
            assert!(says, "{}", refused.context());
        }

        sg(&url, &["setup"]).expect_json(0, &json!({"ok": true}));
        let permit = sg(&url, &["acquire", "--key", &key, "--permits", "2"]);
        permit.expect_code(0);
        expect_permits_in_status(&url, &key, 1);
        assert!(backend.release(&held.lock_id).unwrap());
        drop_tables(&tables);
    }

    #[test]
    fn status_and_list_exit_0_on_tables_the_typescript_library_made() {
        status_and_list_exit_0(Made::ByTypeScript);
    }

    #[test]
    fn status_and_list_exit_0_on_tables_set_up_before_holders() {
        status_and_list_exit_0(Made::BeforeHolders);
    }

    #[test]
    fn status_and_list_exit_0_on_tables_set_up_before_semaphores() {
        status_and_list_exit_0(Made::BeforeSemaphores);
    }

    /// The acquire function replaced by one that never grants: `acquire` answers "locked"
    /// until `syncguard setup` puts this version's back.
    #[test]
    fn setup_puts_back_a_function_replaced_behind_its_back() {
        let (_backend, locks) = backend_on_fresh_tables(&shared_postgres().url());
        let tables = TableNames::new(&locks, &locks.replace("t_locks_", "t_fences_")).unwrap();
        let url = url_of(&tables);
        let acquire = format!(
            "{locks}_acquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, \
             bigint)"
        );
        let original = source_of(&acquire);
        shared_postgres()
            .client()
            .batch_execute(&format!(
                "CREATE OR REPLACE FUNCTION {locks}_acquire_v8(text, text, bigint, text, text, \
                 bigint, bigint, text, text, text, bigint, OUT fence text, OUT expires_at_ms bigint, \
                 OUT bad_counter bigint, OUT malformed boolean, OUT places_ahead bigint) \
                 LANGUAGE plpgsql AS $$ BEGIN RETURN; END $$"
            ))
            .unwrap();
        let key = unique("replaced-cli");
        sg(&url, &["acquire", "--key", &key]).expect_code(1);
        sg(&url, &["setup"]).expect_json(0, &json!({"ok": true}));
        assert_eq!(source_of(&acquire), original);
        let acquired = sg(&url, &["acquire", "--key", &key]);
        acquired.expect_code(0);
        let lock_id = acquired.json()["lockId"].as_str().map(str::to_owned);
        let lock_id = lock_id.expect("acquire prints the lock id");
        sg(&url, &["release", "--lock-id", &lock_id]).expect_code(0);
    }
}
