//! PostgreSQL errors through a real server: messages that keep the server's words whatever the
//! password, URL parameters as libpq reads them, lock tables whose schema was changed, rows that
//! are not SyncGuard records, and acquisitions whose answer never came.

use std::process::Command;
use std::time::{Duration, Instant};

use crate::support::{
    self, BRISK, PATIENT, PgServer, TTL, lease, postgres_now_ms, shared_postgres,
    shared_postgres_with_tables, unique,
};
use syncguard::driver::{Driver, LeaseRef, LockId, Ttl, generate_lock_id};
use syncguard::postgres::PostgresBackend;
use syncguard::{ErrorCode, LeaseKind, LockBackend, LockError, Lookup};

/// A lowercase suffix for names of roles, schemas and applications that no other test uses.
fn suffix() -> String {
    generate_lock_id().to_lowercase().replace('-', "_")
}

/// Waits (a minute at most) until `done`.
fn await_condition(what: &str, mut done: impl FnMut() -> bool) {
    let give_up = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < give_up, "waited a minute for: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Passwords: redacted where they stand, never searched for in the server's words
// ---------------------------------------------------------------------------------------------

/// A role whose password is `a`, and wrong passwords as short as `s` and `er`: the server's
/// message reaches the caller word for word (`password authentication failed for user "…"`),
/// and no password is in it.
#[test]
fn short_passwords_leave_the_servers_messages_intact() {
    let server = shared_postgres_with_tables();
    let role = format!("sg_user_{}", suffix());
    server
        .client()
        .batch_execute(&format!("CREATE ROLE \"{role}\" LOGIN PASSWORD 'a'"))
        .unwrap();
    let at = format!("PostgreSQL at 127.0.0.1:{}/postgres", server.port);
    let long = "a-long-wrong-password-0123456789";
    for wrong in ["s", "er", "se", long] {
        let url = format!(
            "postgres://{role}:{wrong}@127.0.0.1:{}/postgres",
            server.port
        );
        let err = PostgresBackend::connect(&url).unwrap_err();
        assert_eq!(err.code(), ErrorCode::AuthFailed, "{err}");
        assert_eq!(
            err.message(),
            format!("{at}: password authentication failed for user \"{role}\" (SQLSTATE 28P01)"),
            "password {wrong:?}"
        );
        assert!(!format!("{err} {err:?}").contains(long), "{err:?}");
    }
    // The right password, `a`, and tables that do not exist: the advice reads as written.
    let url = format!(
        "postgres://{role}:a@127.0.0.1:{}/postgres?table=absent_locks&fence_table=absent_fences",
        server.port
    );
    let backend = PostgresBackend::connect(&url).unwrap();
    let err = backend.acquire(&unique("short-password"), TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::Internal, "{err}");
    assert!(
        err.message().starts_with(&format!(
            "{at}: the syncguard tables are missing or outdated: run `syncguard setup` (or \
             syncguard::postgres::setup_schema, or apply schema.sql)"
        )),
        "{err}"
    );
    assert!(err.message().contains("\"absent_locks\""), "{err}");
    let shown = format!("{backend:?}");
    assert!(shown.contains(&format!("{role}:***@")), "{shown}");
}

// ---------------------------------------------------------------------------------------------
// URL parameters as libpq reads them
// ---------------------------------------------------------------------------------------------

/// `?options=-c%20search_path%3D…` reaches the server with its space: the backend's tables are
/// those of that schema.
#[test]
fn options_in_the_url_reach_the_server_as_written() {
    let server = shared_postgres();
    let schema = format!("sg_path_{}", suffix());
    let mut client = server.client();
    client
        .batch_execute(&format!("CREATE SCHEMA {schema}"))
        .unwrap();
    let url = format!("{}?options=-c%20search_path%3D{schema}", server.url());
    let backend = support::patient_postgres(&url).build().unwrap();
    backend.setup_schema().unwrap();
    let held = lease(backend.acquire(&unique("search-path"), TTL));
    let stored: i64 = client
        .query_one(
            &format!("SELECT count(*) FROM {schema}.syncguard_locks WHERE lock_id = $1"),
            &[&held.lock_id],
        )
        .unwrap()
        .get(0);
    assert_eq!(stored, 1, "the lock is in the schema the options name");
    assert!(backend.release(&held.lock_id).unwrap());
}

// ---------------------------------------------------------------------------------------------
// Lock tables changed by hand: the deployment's error, not the caller's
// ---------------------------------------------------------------------------------------------

/// A NOT NULL column or a CHECK constraint added to the lock table makes the server refuse
/// syncguard's rows: `Internal` (the CLI's exit 3), naming the table, the column or constraint,
/// and what to do — not `InvalidArgument` ("bad usage"), which is for what the caller passed.
#[test]
fn a_lock_table_whose_schema_was_changed_is_a_deployment_error() {
    let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
    let mut client = shared_postgres().client();
    let expect_schema_error = |err: LockError, parts: &[&str]| {
        assert_eq!(err.code(), ErrorCode::Internal, "{err}");
        for part in parts {
            assert!(err.message().contains(part), "{part}: {err}");
        }
        assert!(
            err.message()
                .contains("differ from what `syncguard setup` creates"),
            "{err}"
        );
    };
    client
        .batch_execute(&format!(
            "ALTER TABLE {locks} ADD COLUMN owner text NOT NULL"
        ))
        .unwrap();
    expect_schema_error(
        backend.acquire(&unique("not-null"), TTL).unwrap_err(),
        &[
            &format!("table \"{locks}\""),
            "column \"owner\"",
            "SQLSTATE 23502",
        ],
    );
    client
        .batch_execute(&format!(
            "ALTER TABLE {locks} DROP COLUMN owner, ADD CONSTRAINT short_leases \
             CHECK (expires_at_ms - acquired_at_ms < 1000)"
        ))
        .unwrap();
    expect_schema_error(
        backend.acquire(&unique("check"), TTL).unwrap_err(),
        &["constraint \"short_leases\"", "SQLSTATE 23514"],
    );
}

// ---------------------------------------------------------------------------------------------
// Rows that are not SyncGuard records
// ---------------------------------------------------------------------------------------------

/// One rule for every operation: a row that is not a SyncGuard record (a fence NULL, short,
/// not digits or zero; a malformed lock id; no expiry), live or expired, is an `Internal` error
/// naming its key — never "locked", "absent" or "not found", nor left out of a listing — and
/// nothing changes it: acquire
/// neither takes it over nor draws a fence number, the opt-in cleanup leaves it.
#[test]
fn rows_that_are_not_syncguard_records_are_internal_errors_everywhere() {
    let (backend, locks) = support::backend_on_fresh_tables(&shared_postgres().url());
    let fences = locks.replacen("t_locks_", "t_fences_", 1);
    let cleaning = support::patient_postgres(&shared_postgres().url())
        .table_name(&locks)
        .fence_table_name(&fences)
        .cleanup_in_is_locked(true)
        .build()
        .unwrap();
    let mut client = shared_postgres().client();
    client
        .batch_execute(&format!(
            "ALTER TABLE {locks} ALTER COLUMN fence DROP NOT NULL, \
             ALTER COLUMN expires_at_ms DROP NOT NULL"
        ))
        .unwrap();
    let now = postgres_now_ms(&mut client);
    let (live, past) = (Some(now + 60_000), Some(now - 60_000));
    let one = Some("000000000000001");
    let cases: Vec<(&str, String, Option<&str>, Option<i64>)> = vec![
        ("null-fence", generate_lock_id(), None, live),
        ("short-fence", generate_lock_id(), Some("12"), live),
        (
            "letter-fence",
            generate_lock_id(),
            Some("00000000000001x"),
            live,
        ),
        (
            "zero-fence",
            generate_lock_id(),
            Some("000000000000000"),
            live,
        ),
        ("bad-lock-id", "not a lock id".to_owned(), one, live),
        ("null-expiry", generate_lock_id(), one, None),
        ("expired-short-fence", generate_lock_id(), Some("12"), past),
    ];
    for (name, lock_id, fence, expires_at_ms) in cases {
        let key = unique(name);
        client
            .execute(
                &format!(
                    "INSERT INTO {locks} (key, lock_id, expires_at_ms, acquired_at_ms, fence, \
                     user_key) VALUES ($1, $2, $3, $4, $5, $1)"
                ),
                &[&key, &lock_id, &expires_at_ms, &(now - 1000), &fence],
            )
            .unwrap();
        let mut checks: Vec<(&str, syncguard::Result<String>)> = vec![
            (
                "acquire",
                backend.acquire(&key, TTL).map(|o| format!("{o:?}")),
            ),
            ("is_locked", backend.is_locked(&key).map(|l| l.to_string())),
            (
                "is_locked with cleanup",
                cleaning.is_locked(&key).map(|l| l.to_string()),
            ),
            (
                "lookup by key",
                backend.lookup(Lookup::Key(&key)).map(|l| format!("{l:?}")),
            ),
            (
                "list by its key as prefix",
                backend
                    .list(&key, LeaseKind::Lock, 10)
                    .map(|l| format!("{l:?}")),
            ),
        ];
        if let Ok(id) = LockId::new(&lock_id) {
            let lease = LeaseRef::new(&id);
            let ttl = Ttl::new(TTL).unwrap();
            checks.extend([
                (
                    "lookup by id",
                    backend
                        .lookup(Lookup::LockId(&lock_id))
                        .map(|l| format!("{l:?}")),
                ),
                (
                    "extend",
                    backend.extend(&lock_id, TTL).map(|e| format!("{e:?}")),
                ),
                (
                    "batch renewal",
                    backend
                        .extend_leases(&[(lease, ttl)])
                        .remove(0)
                        .map(|o| format!("{:?}", o.is_applied())),
                ),
                ("release", backend.release(&lock_id).map(|r| r.to_string())),
            ]);
        }
        for (operation, result) in checks {
            let err = match result {
                Ok(answer) => panic!("{name}: {operation} answered {answer}"),
                Err(err) => err,
            };
            assert_eq!(
                err.code(),
                ErrorCode::Internal,
                "{name}: {operation}: {err}"
            );
            assert!(
                err.message().contains(&key),
                "{name}: {operation}: the message names the key: {err}"
            );
        }
        let row = client
            .query_one(
                &format!("SELECT lock_id, fence, expires_at_ms FROM {locks} WHERE key = $1"),
                &[&key],
            )
            .unwrap();
        assert_eq!(
            (
                row.get::<_, String>(0),
                row.get::<_, Option<String>>(1),
                row.get::<_, Option<i64>>(2)
            ),
            (lock_id.clone(), fence.map(str::to_owned), expires_at_ms),
            "{name}: the row is left as it was"
        );
        let counters: i64 = client
            .query_one(
                &format!("SELECT count(*) FROM {fences} WHERE key_debug = $1"),
                &[&key],
            )
            .unwrap()
            .get(0);
        assert_eq!(counters, 0, "{name}: acquire drew no fence number");
    }
}

// ---------------------------------------------------------------------------------------------
// Acquisitions in doubt
// ---------------------------------------------------------------------------------------------

/// Whether the process `pid` has SIGINT pending (a cancel request reached it while stopped).
fn sigint_pending(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .filter_map(|line| {
            line.strip_prefix("ShdPnd:")
                .or_else(|| line.strip_prefix("SigPnd:"))
        })
        .filter_map(|mask| u64::from_str_radix(mask.trim(), 16).ok())
        .any(|mask| mask & (1 << (2 - 1)) != 0)
}

fn signal(pid: i32, signal: &str) {
    let status = Command::new("kill")
        .args([format!("-{signal}"), pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill -{signal} {pid}");
}

/// The server process behind the acquire's connection is stopped (SIGSTOP) after the statement
/// is sent: the acquire fails at its deadline, marked in doubt with the lock id it generated.
/// Resumed, the server carries the statement out (the cancel request came while it was
/// stopped, and a cancel that finds it between statements is ignored): the lock is held under
/// that very lock id, which `release` removes.
#[test]
fn an_acquire_without_an_answer_is_in_doubt_with_its_lock_id() {
    let server = shared_postgres_with_tables();
    let application = format!("sg_doubt_{}", suffix());
    // Only the stopped call needs to miss its deadline.
    let backend = one_connection_backend(server, &application, BRISK);
    let key = unique("in-doubt");
    assert!(
        !backend.is_locked(&key).unwrap(),
        "opens the pool's connection"
    );
    let mut client = server.client();
    let mut sessions = || sessions_of(&mut client, &application);
    let pid = the_one_session(&mut sessions);

    signal(pid, "STOP");
    let err = backend.acquire(&key, TTL).unwrap_err();
    assert_eq!(err.code(), ErrorCode::NetworkTimeout, "{err}");
    assert!(err.is_in_doubt(), "{err:?}");
    let lock_id = err
        .lock_id()
        .expect("the lock id of the acquisition")
        .to_owned();
    assert!(LockId::new(&lock_id).is_ok());
    assert!(!format!("{err} {err:?}").contains(&lock_id));
    await_condition(
        "the cancel request reaches the stopped server process",
        || sigint_pending(pid),
    );
    signal(pid, "CONT");
    // The server process ends once it has read what the dropped connection had sent.
    await_condition("the server process ends", || !sessions().contains(&pid));

    let mut client = server.client();
    let holder: Option<String> = client
        .query_opt(
            "SELECT lock_id FROM syncguard_locks WHERE user_key = $1",
            &[&key],
        )
        .unwrap()
        .map(|row| row.get(0));
    assert_eq!(holder.as_deref(), Some(lock_id.as_str()), "applied late");
    assert!(backend.release(&lock_id).unwrap());
    assert!(!backend.is_locked(&key).unwrap());
}

/// The server ends a pooled connection while it sits idle (`pg_terminate_backend`, as an
/// administrator, a restart or `idle_session_timeout` would): the next calls do not see it. The
/// connection's end is found before a statement is sent on it, and the call goes to a fresh
/// connection (a statement sent on it would be answered with the termination's error).
#[test]
fn a_connection_ended_while_idle_is_replaced_unseen() {
    let server = shared_postgres_with_tables();
    let application = format!("sg_idle_{}", suffix());
    let backend = one_connection_backend(server, &application, PATIENT);
    let key = unique("idle-end");
    let held = lease(backend.acquire(&key, TTL));
    let mut client = server.client();
    let mut sessions = || sessions_of(&mut client, &application);
    let pid = the_one_session(&mut sessions);
    let mut admin = server.client();
    let terminated: bool = admin
        .query_one("SELECT pg_terminate_backend($1)", &[&pid])
        .unwrap()
        .get(0);
    assert!(terminated);
    await_condition("the server process ends", || !sessions().contains(&pid));

    assert!(backend.is_locked(&key).unwrap());
    assert!(backend.release(&held.lock_id).unwrap());
    assert!(!backend.is_locked(&key).unwrap());
}

/// A backend of one pooled connection, found on the server by its `application_name`.
fn one_connection_backend(
    server: &PgServer,
    application: &str,
    statement_timeout: Duration,
) -> PostgresBackend {
    PostgresBackend::builder()
        .url(format!("{}?application_name={application}", server.url()))
        .pool_size(1)
        .connect_timeout(PATIENT)
        .pool_timeout(PATIENT)
        .statement_timeout(statement_timeout)
        .build()
        .unwrap()
}

/// The server processes of the sessions named `application`.
fn sessions_of(client: &mut postgres::Client, application: &str) -> Vec<i32> {
    client
        .query(
            "SELECT pid FROM pg_stat_activity WHERE application_name = $1",
            &[&application],
        )
        .unwrap()
        .iter()
        .map(|row| row.get(0))
        .collect()
}

/// The server process of a one-connection backend's session, once it is the only one (the
/// probe connection of `build()` may still be leaving).
fn the_one_session(sessions: &mut impl FnMut() -> Vec<i32>) -> i32 {
    await_condition("one session of the backend", || sessions().len() == 1);
    sessions()[0]
}
