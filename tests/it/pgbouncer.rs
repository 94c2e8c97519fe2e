//! The PostgreSQL backend behind a real PgBouncer in transaction mode (DESIGN.md §10), with
//! PgBouncer's default settings otherwise: no startup parameters it would reject, no named
//! prepared statements that outlive their transaction.
//!
//! - the contract suites, through the pooler;
//! - a mixed workload of many threads on few server connections: no errors, mutual exclusion;
//! - several processes sharing the pooler's server connections (the test binary re-executed as
//!   workers): read-only calls change nothing, and a held lock survives other processes'
//!   releases of other lock ids. A statement name that one process prepared and another
//!   process's statement of the same name runs (on a server connection both used) is exactly
//!   how a lookup could delete someone else's lock; the parent checks its lock in the table
//!   itself, directly on the cluster.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use crate::support::{self, child};
use crate::support::{
    TTL, shared_pgbouncer, shared_postgres, shared_postgres_backend, shared_postgres_with_tables,
    unique,
};
use serde::{Deserialize, Serialize};
use syncguard::driver::generate_lock_id;
use syncguard::postgres::PostgresBackend;
use syncguard::{AcquireOutcome, LockBackend, LockInfo, Lookup};

/// A backend connected through the shared PgBouncer (transaction mode, 4 server connections),
/// its timeouts [`PATIENT`](crate::support::PATIENT) hang guards.
fn backend_through_pgbouncer() -> PostgresBackend {
    shared_postgres_with_tables();
    let bouncer = shared_pgbouncer();
    crate::support::patient_postgres(&bouncer.url())
        .build()
        .unwrap_or_else(|error| {
            panic!(
                "connecting through PgBouncer failed: {error}\nPgBouncer's log:\n{}",
                bouncer.log_tail()
            )
        })
}

syncguard::backend_contract!(backend_through_pgbouncer);
syncguard::guard_contract!(topology: backend_through_pgbouncer);
syncguard::semaphore_contract!(backend_through_pgbouncer);
syncguard::line_contract!(topology: backend_through_pgbouncer);
syncguard::shared_contract!(topology: backend_through_pgbouncer);
syncguard::multi_contract!(backend_through_pgbouncer);
syncguard::lost_answer_contract!(backend_through_pgbouncer);
syncguard::break_contract!(backend_through_pgbouncer);
syncguard::watch_contract!(backend_through_pgbouncer);
syncguard::leadership_contract!(backend_through_pgbouncer);

/// Whether `info` describes the lock `lock_id` with `fence`.
fn describes(info: &LockInfo, lock_id: &str, fence: &str) -> bool {
    info.lock_id_hash == syncguard::driver::hash_key(lock_id) && info.fence.to_string() == fence
}

/// Errors and wrong answers seen by a workload, with the first few described.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Tally {
    operations: usize,
    errors: usize,
    wrong_answers: usize,
    first: Vec<String>,
}

impl Tally {
    const KEEP: usize = 8;

    fn note(&mut self, what: String) {
        if self.first.len() < Self::KEEP {
            self.first.push(what);
        }
    }

    /// Counts one call; an error is counted and described, and gives `None`.
    fn call<T>(&mut self, what: &str, result: syncguard::Result<T>) -> Option<T> {
        self.operations += 1;
        match result {
            Ok(value) => Some(value),
            Err(error) => {
                self.errors += 1;
                self.note(format!("{what}: {error}"));
                None
            }
        }
    }

    /// Counts a wrong answer unless `ok`.
    fn expect(&mut self, ok: bool, what: impl FnOnce() -> String) {
        if !ok {
            self.wrong_answers += 1;
            self.note(format!("wrong answer: {}", what()));
        }
    }

    fn add(&mut self, other: Tally) {
        self.operations += other.operations;
        self.errors += other.errors;
        self.wrong_answers += other.wrong_answers;
        for what in other.first {
            self.note(what);
        }
    }

    fn is_clean(&self) -> bool {
        self.errors == 0 && self.wrong_answers == 0
    }
}

/// One full cycle on a key only this caller uses: acquire, extend, is_locked, lookup by key and
/// by lock id, release, and lookups after the release.
fn own_key_cycle(backend: &dyn LockBackend, key: &str, tally: &mut Tally) {
    let Some(outcome) = tally.call("acquire(own key)", backend.acquire(key, TTL)) else {
        return;
    };
    let AcquireOutcome::Acquired(lease) = outcome else {
        tally.expect(false, || {
            format!("acquire of the free own key {key:?}: Locked")
        });
        return;
    };
    let (id, fence) = (lease.lock_id.as_str(), lease.fence.to_string());
    if let Some(extended) = tally.call("extend(own)", backend.extend(id, TTL)) {
        tally.expect(extended.is_some(), || "extend of a held lock: None".into());
    }
    sees_the_lock(backend, tally, "own", (key, id, &fence));
    if let Some(released) = tally.call("release(own)", backend.release(id)) {
        tally.expect(released, || "release of a held lock: false".into());
    }
    if let Some(info) = tally.call(
        "lookup(LockId(released))",
        backend.lookup(Lookup::LockId(id)),
    ) {
        tally.expect(info.is_none(), || "lookup of a released lock: Some".into());
    }
}

// ---------------------------------------------------------------------------------------------
// Many threads, few server connections
// ---------------------------------------------------------------------------------------------

/// 8 threads over two backends (16 client connections at most) on PgBouncer's 4 server
/// connections, each on keys of its own and on keys all of them share, for a fixed number of
/// iterations: no call fails, every answer is right, and a shared key never has two holders.
#[test]
fn mixed_workload_of_many_threads_on_few_server_connections() {
    const THREADS: usize = 8;
    const ITERATIONS: usize = 30;
    let backends = [
        Arc::new(backend_through_pgbouncer()),
        Arc::new(backend_through_pgbouncer()),
    ];
    let shared_keys: Vec<String> = (0..3).map(|k| unique(&format!("shared-{k}"))).collect();
    let holders: Vec<AtomicUsize> = shared_keys.iter().map(|_| AtomicUsize::new(0)).collect();
    let double_holds = AtomicUsize::new(0);
    let fences: Mutex<BTreeMap<usize, Vec<u64>>> = Mutex::new(BTreeMap::new());
    let total = Mutex::new(Tally::default());
    thread::scope(|scope| {
        for t in 0..THREADS {
            let backend = Arc::clone(&backends[t % backends.len()]);
            let (shared_keys, holders, double_holds, fences, total) =
                (&shared_keys, &holders, &double_holds, &fences, &total);
            scope.spawn(move || {
                let own_keys = [unique(&format!("own-{t}-a")), unique(&format!("own-{t}-b"))];
                let mut tally = Tally::default();
                for i in 0..ITERATIONS {
                    own_key_cycle(backend.as_ref(), &own_keys[i % 2], &mut tally);
                    let k = (t + i) % shared_keys.len();
                    let key = &shared_keys[k];
                    match tally.call("acquire(shared)", backend.acquire(key, TTL)) {
                        Some(AcquireOutcome::Acquired(lease)) => {
                            if holders[k].fetch_add(1, Ordering::SeqCst) != 0 {
                                double_holds.fetch_add(1, Ordering::SeqCst);
                            }
                            fences
                                .lock()
                                .unwrap()
                                .entry(k)
                                .or_default()
                                .push(lease.fence.value());
                            let id = lease.lock_id.as_str();
                            if let Some(extended) =
                                tally.call("extend(shared)", backend.extend(id, TTL))
                            {
                                tally.expect(extended.is_some(), || {
                                    "extend of a held shared lock: None".into()
                                });
                            }
                            if let Some(info) = tally
                                .call("lookup(LockId(shared))", backend.lookup(Lookup::LockId(id)))
                            {
                                tally.expect(
                                    info.is_some_and(|i| {
                                        describes(&i, id, &lease.fence.to_string())
                                    }),
                                    || "lookup of a held shared lock: not that lock".into(),
                                );
                            }
                            holders[k].fetch_sub(1, Ordering::SeqCst);
                            if let Some(released) =
                                tally.call("release(shared)", backend.release(id))
                            {
                                tally.expect(released, || {
                                    "release of a held shared lock: false".into()
                                });
                            }
                        }
                        Some(AcquireOutcome::Locked) => {
                            // Someone else holds it (or just did): any answer is right, but
                            // the calls must work.
                            tally.call("is_locked(shared)", backend.is_locked(key));
                            tally.call("lookup(Key(shared))", backend.lookup(Lookup::Key(key)));
                        }
                        None => {}
                    }
                }
                total.lock().unwrap().add(tally);
            });
        }
    });
    let total = total.into_inner().unwrap();
    eprintln!("mixed workload through PgBouncer: {total:?}");
    assert!(total.is_clean(), "through PgBouncer: {total:#?}");
    assert_eq!(
        double_holds.load(Ordering::SeqCst),
        0,
        "two holders of a shared key at once"
    );
    let fences = fences.into_inner().unwrap();
    assert!(!fences.is_empty(), "the shared keys were acquired");
    for (k, mut issued) in fences {
        let count = issued.len();
        issued.sort_unstable();
        issued.dedup();
        assert_eq!(issued.len(), count, "shared key {k}: a fence issued twice");
    }
}

// ---------------------------------------------------------------------------------------------
// Several processes sharing the pooler's server connections
// ---------------------------------------------------------------------------------------------

const ENV_PLAN: &str = "SYNCGUARD_PGBOUNCER_WORKER_PLAN";
const PROCESSES: usize = 3;
const WORKER_THREADS: usize = 3;
const WORKER_ITERATIONS: usize = 30;

/// What a worker process does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
enum Mode {
    /// Lookups (by key and by lock id, of locks that exist and that do not) and is_locked on
    /// the parent's keys, plus full cycles on keys of its own.
    ReadOnly,
    /// Releases and extends of lock ids other than the parent's (its own, before and after
    /// releasing them, and ids that never existed), plus lookups of the parent's lock.
    ReleasesOfOtherIds,
}

/// A worker process's instructions, passed as JSON in [`ENV_PLAN`].
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WorkerPlan {
    url: String,
    mode: Mode,
    worker: usize,
    threads: usize,
    iterations: usize,
    held_key: String,
    held_lock_id: String,
    held_fence: String,
    expired_key: String,
    report: PathBuf,
}

/// One worker process. Ignored in normal runs: the multi-process tests start it with a plan.
#[test]
#[ignore = "a worker process of the multi-process PgBouncer tests"]
fn pgbouncer_worker_process() {
    let Ok(plan) = std::env::var(ENV_PLAN) else {
        return;
    };
    let plan: WorkerPlan = serde_json::from_str(&plan).expect("the worker's plan");
    let report = run_worker(&plan);
    std::fs::write(
        &plan.report,
        serde_json::to_string(&report).expect("a report in JSON"),
    )
    .expect("write the worker's report");
}

fn run_worker(plan: &WorkerPlan) -> Tally {
    let mut tally = Tally::default();
    let Some(backend) = tally.call("connect", PostgresBackend::connect(&plan.url)) else {
        return tally;
    };
    let total = Mutex::new(tally);
    thread::scope(|scope| {
        for t in 0..plan.threads {
            let (backend, total) = (&backend, &total);
            scope.spawn(move || {
                let own_key = unique(&format!("worker-{}-{t}", plan.worker));
                let mut tally = Tally::default();
                for _ in 0..plan.iterations {
                    match plan.mode {
                        Mode::ReadOnly => read_only_round(backend, plan, &own_key, &mut tally),
                        Mode::ReleasesOfOtherIds => {
                            releases_round(backend, plan, &own_key, &mut tally)
                        }
                    }
                }
                total.lock().unwrap().add(tally);
            });
        }
    });
    total.into_inner().unwrap()
}

/// Checks that the parent's lock is seen, unchanged, by key and by lock id.
fn sees_the_held_lock(backend: &PostgresBackend, plan: &WorkerPlan, tally: &mut Tally) {
    let held = (
        plan.held_key.as_str(),
        plan.held_lock_id.as_str(),
        plan.held_fence.as_str(),
    );
    sees_the_lock(backend, tally, "held", held);
}

/// Checks that the lock `(key, lock id, fence)` (`whose`: "own" or "held") is held and seen,
/// unchanged, by key and by lock id.
fn sees_the_lock(
    backend: &dyn LockBackend,
    tally: &mut Tally,
    whose: &str,
    (key, id, fence): (&str, &str, &str),
) {
    if let Some(locked) = tally.call(&format!("is_locked({whose})"), backend.is_locked(key)) {
        tally.expect(locked, || format!("is_locked of the {whose} key: false"));
    }
    for lookup in [Lookup::Key(key), Lookup::LockId(id)] {
        let what = format!("lookup({lookup:?}) of the {whose} lock");
        if let Some(info) = tally.call(&what, backend.lookup(lookup)) {
            tally.expect(info.is_some_and(|i| describes(&i, id, fence)), || {
                format!("{what}: not that lock")
            });
        }
    }
}

fn read_only_round(backend: &PostgresBackend, plan: &WorkerPlan, own_key: &str, tally: &mut Tally) {
    sees_the_held_lock(backend, plan, tally);
    let absent_id = generate_lock_id();
    if let Some(info) = tally.call(
        "lookup(LockId(absent))",
        backend.lookup(Lookup::LockId(&absent_id)),
    ) {
        tally.expect(info.is_none(), || {
            "lookup of an unknown lock id: Some".into()
        });
    }
    let expired = &plan.expired_key;
    if let Some(info) = tally.call("lookup(Key(expired))", backend.lookup(Lookup::Key(expired))) {
        tally.expect(info.is_none(), || "lookup of an expired lock: Some".into());
    }
    if let Some(locked) = tally.call("is_locked(expired)", backend.is_locked(expired)) {
        tally.expect(!locked, || "is_locked of an expired lock: true".into());
    }
    own_key_cycle(backend, own_key, tally);
}

fn releases_round(backend: &PostgresBackend, plan: &WorkerPlan, own_key: &str, tally: &mut Tally) {
    if let Some(AcquireOutcome::Acquired(lease)) =
        tally.call("acquire(own)", backend.acquire(own_key, TTL))
    {
        let id = lease.lock_id.as_str();
        if let Some(extended) = tally.call("extend(own)", backend.extend(id, TTL)) {
            tally.expect(extended.is_some(), || "extend of a held lock: None".into());
        }
        sees_the_held_lock(backend, plan, tally);
        if let Some(released) = tally.call("release(own)", backend.release(id)) {
            tally.expect(released, || "release of a held lock: false".into());
        }
        if let Some(released) = tally.call("release(own again)", backend.release(id)) {
            tally.expect(!released, || "second release of a lock: true".into());
        }
        if let Some(extended) = tally.call("extend(released)", backend.extend(id, TTL)) {
            tally.expect(extended.is_none(), || {
                "extend of a released lock: Some".into()
            });
        }
    } else {
        tally.expect(false, || "acquire of the free own key: not Acquired".into());
    }
    let absent_id = generate_lock_id();
    if let Some(released) = tally.call("release(absent)", backend.release(&absent_id)) {
        tally.expect(!released, || "release of an unknown lock id: true".into());
    }
    if let Some(extended) = tally.call("extend(absent)", backend.extend(&absent_id, TTL)) {
        tally.expect(extended.is_none(), || {
            "extend of an unknown lock id: Some".into()
        });
    }
    sees_the_held_lock(backend, plan, tally);
}

/// Worker processes, killed (and reaped) if the test ends before they do.
struct Workers(Vec<(usize, Child)>);

impl Drop for Workers {
    fn drop(&mut self) {
        for (_, child) in &mut self.0 {
            if let Ok(None) = child.try_wait() {
                let _ = child.kill();
            }
            let _ = child.wait();
        }
    }
}

/// The rows that hold the parent's locks and their fence counters, read on the cluster.
type Snapshot = Vec<String>;

fn snapshot(client: &mut postgres::Client, keys: &[String]) -> Snapshot {
    let mut rows: Snapshot = client
        .query(
            "SELECT key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key \
             FROM syncguard_locks WHERE key = ANY($1) ORDER BY key",
            &[&keys],
        )
        .expect("read the lock rows")
        .iter()
        .map(|row| {
            format!(
                "lock {:?} id={} expires={} acquired={} fence={} user_key={:?}",
                row.get::<_, String>(0),
                row.get::<_, String>(1),
                row.get::<_, i64>(2),
                row.get::<_, i64>(3),
                row.get::<_, String>(4),
                row.get::<_, String>(5),
            )
        })
        .collect();
    let fence_keys: Vec<String> = keys.iter().map(|key| format!("fence:{key}")).collect();
    rows.extend(
        client
            .query(
                "SELECT fence_key, fence FROM syncguard_fence_counters \
                 WHERE fence_key = ANY($1) ORDER BY fence_key",
                &[&fence_keys],
            )
            .expect("read the fence counters")
            .iter()
            .map(|row| {
                format!(
                    "counter {:?} = {}",
                    row.get::<_, String>(0),
                    row.get::<_, i64>(1)
                )
            }),
    );
    rows
}

/// Runs [`PROCESSES`] workers in `mode` through the shared PgBouncer while this process holds
/// a lock (taken directly on the cluster, long TTL, no heartbeat) and has planted an expired
/// lock; then checks, in the table, that both are exactly as they were, and that the workers
/// saw no error and no wrong answer.
///
/// No worker passes the parent's lock id to release or extend, nor acquires the parent's keys:
/// its only calls on them are lookups and is_locked. A change to those rows can only come
/// from a read-only call that ran some other statement (another process's, of the same name,
/// on a server connection both used).
fn parent_lock_survives_workers(mode: Mode) {
    const HELD_TTL: Duration = Duration::from_secs(300);
    let direct = shared_postgres_backend(); // bypassing the pooler
    let bouncer_url = shared_pgbouncer().url();
    let mut client = shared_postgres().client();

    let held_key = unique("held");
    let held = match direct
        .acquire(&held_key, HELD_TTL)
        .expect("acquire directly")
    {
        AcquireOutcome::Acquired(lease) => lease,
        AcquireOutcome::Locked => panic!("a fresh key is free"),
    };
    let expired_key = unique("expired");
    client
        .execute(
            "INSERT INTO syncguard_locks (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key) \
             SELECT $1::text, $2::text, now_ms - 10000, now_ms - 40000, '000000000000001', $1::text \
             FROM (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms) t",
            &[&expired_key, &generate_lock_id()],
        )
        .expect("plant an expired lock");
    client
        .execute(
            "INSERT INTO syncguard_fence_counters (fence_key, fence, key_debug) VALUES ($1, 1, $2)",
            &[&format!("fence:{expired_key}"), &expired_key],
        )
        .expect("plant its fence counter");
    let watched = vec![
        direct.storage_key(&held_key).expect("a storage key"),
        direct.storage_key(&expired_key).expect("a storage key"),
    ];
    let before = snapshot(&mut client, &watched);
    assert_eq!(before.len(), 4, "two lock rows, two counters: {before:#?}");

    let dir = support::scratch_dir("pgbouncer-workers");
    let worker_test = child::test_name!(pgbouncer_worker_process);
    let mut workers = Workers(Vec::new());
    for worker in 0..PROCESSES {
        let plan = WorkerPlan {
            url: bouncer_url.clone(),
            mode,
            worker,
            threads: WORKER_THREADS,
            iterations: WORKER_ITERATIONS,
            held_key: held_key.clone(),
            held_lock_id: held.lock_id.clone(),
            held_fence: held.fence.to_string(),
            expired_key: expired_key.clone(),
            report: dir.join(format!("report-{worker}.json")),
        };
        let output = |stream| {
            std::fs::File::create(dir.join(format!("{stream}-{worker}")))
                .expect("a file for the worker's output")
        };
        let process = child::one_test(worker_test)
            .env(
                ENV_PLAN,
                serde_json::to_string(&plan).expect("a plan in JSON"),
            )
            .stdin(Stdio::null())
            .stdout(output("stdout"))
            .stderr(output("stderr"))
            .spawn()
            .expect("start a worker process");
        workers.0.push((worker, process));
    }

    // The workers end after their iterations; a minute is far more than they need.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut problems = Vec::new();
    let mut total = Tally::default();
    for (worker, process) in &mut workers.0 {
        let status = loop {
            if let Some(status) = process.try_wait().expect("check on a worker") {
                break status;
            }
            assert!(
                Instant::now() < deadline,
                "worker {worker} had not finished after a minute"
            );
            thread::sleep(Duration::from_millis(20));
        };
        let output = |stream| {
            std::fs::read_to_string(dir.join(format!("{stream}-{worker}"))).unwrap_or_default()
        };
        if let Some(failure) =
            child::failure(worker_test, status, &output("stdout"), &output("stderr"))
        {
            problems.push(format!("worker {worker}: {failure}"));
        }
        match read_report(&dir.join(format!("report-{worker}.json"))) {
            Some(report) => total.add(report),
            None => problems.push(format!("worker {worker} wrote no report")),
        }
    }
    drop(workers);
    let _ = std::fs::remove_dir_all(&dir);

    let after = snapshot(&mut client, &watched);
    if after != before {
        problems.push(format!(
            "the parent's rows changed while the workers ran ({mode:?}):\nbefore: {before:#?}\n\
             after: {after:#?}"
        ));
    }
    match direct.lookup(Lookup::LockId(&held.lock_id)) {
        Ok(Some(info)) if describes(&info, &held.lock_id, &held.fence.to_string()) => {}
        other => problems.push(format!("the parent's lock, looked up directly: {other:?}")),
    }
    eprintln!("{PROCESSES} worker processes ({mode:?}) through PgBouncer: {total:?}");
    if !total.is_clean() {
        problems.push(format!("the workers, through PgBouncer: {total:#?}"));
    }

    // Clean up before judging, so a failure leaves nothing held.
    let released = direct.release(&held.lock_id);
    let _ = client.execute("DELETE FROM syncguard_locks WHERE key = $1", &[&watched[1]]);
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
    assert!(
        matches!(released, Ok(true)),
        "the parent's release: {released:?}"
    );
}

fn read_report(path: &Path) -> Option<Tally> {
    serde_json::from_str(&std::fs::read_to_string(path).ok()?).ok()
}

/// Other processes' lookups and is_locked calls, on the same few server connections, never
/// change a lock they look at, live or expired.
#[test]
fn read_only_calls_from_other_processes_change_nothing() {
    parent_lock_survives_workers(Mode::ReadOnly);
}

/// Other processes' releases and extends of other lock ids never touch a held lock.
#[test]
fn a_held_lock_survives_other_processes_releases_of_other_ids() {
    parent_lock_survives_workers(Mode::ReleasesOfOtherIds);
}

#[test]
fn a_startup_parameter_the_pooler_refuses_is_a_configuration_error() {
    let url = format!(
        "{}?options=-c%20statement_timeout%3D1000",
        shared_pgbouncer().url()
    );
    let err = PostgresBackend::connect(&url).unwrap_err();
    assert_eq!(err.code(), syncguard::ErrorCode::Internal, "{err}");
    assert!(!err.code().is_transient());
    for text in [
        "unsupported startup parameter",
        "ignore_startup_parameters",
        "08P01",
    ] {
        assert!(err.message().contains(text), "{err}");
    }
    assert!(!err.to_string().contains(support::PG_PASSWORD), "{err}");
}

#[test]
fn setup_and_the_inline_statements_work_through_the_pooler() {
    // Tables of their own, made through the pooler; then without the server functions (as the
    // TypeScript SyncGuard sets them up), so every statement goes inline.
    let (backend, locks) = support::backend_on_fresh_tables(&shared_pgbouncer().url());
    let mut client = shared_postgres().client();
    support::drop_server_functions(&mut client, &locks);
    for round in 0..20 {
        support::assert_lock_cycle(&backend, &unique(&format!("inline-{round}")));
    }
}
