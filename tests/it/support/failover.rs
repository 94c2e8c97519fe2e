//! A failover in the middle of contention, audited: threads contend for one key on a
//! deployment (Cluster or Sentinel) while its primary is killed, a replica takes over and the
//! dead node comes back. Every holder marks its entry and exit in a shared audit, so the test
//! sees two holders at once, a fence that does not grow, an untyped or permanent error, or
//! operations that never resume.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use syncguard::redis::RedisBackend;
use syncguard::{AcquireOutcome, ErrorCode, LockBackend};

/// What a deployment does for the run.
pub trait Topology {
    /// Kills (SIGKILL) the primary that holds the contended key.
    fn kill_primary(&mut self);
    /// Waits until a replica serves the key in its place.
    fn await_promotion(&mut self);
    /// Starts the killed node again (it rejoins as a replica) and waits until it has.
    fn restart_killed(&mut self);
}

/// What the holders saw.
#[derive(Default)]
struct Audit {
    holder: Option<usize>,
    last_fence: Option<u64>,
    violations: Vec<String>,
    errors: Vec<(ErrorCode, String)>,
}

/// One audited run against the backend built from `url`, on the key `key`.
pub struct FailoverRun {
    url: String,
    key: String,
}

/// A backend with the run's deadlines.
fn deployment_backend(url: &str) -> RedisBackend {
    let io = Duration::from_millis(700);
    RedisBackend::builder()
        .url(url)
        .connect_timeout(io)
        .read_timeout(io)
        .write_timeout(io)
        .pool_timeout(Duration::from_secs(2))
        .build()
        .expect("connect to the test deployment")
}

const THREADS: usize = 4;
/// Acquisitions to see before the kill, and again after the deployment is whole.
const ROUNDS: usize = 40;

impl FailoverRun {
    pub fn new(url: &str, key: &str) -> FailoverRun {
        FailoverRun {
            url: url.to_owned(),
            key: key.to_owned(),
        }
    }

    /// `observer_url`: a backend without `min_replicas` whose pooled connection knew the old
    /// primary must answer again once the replica took over, before the dead node returns.
    pub fn run(&self, observer_url: &str, topology: &mut dyn Topology) {
        let backend = Arc::new(deployment_backend(&self.url));
        let observer = deployment_backend(observer_url);
        observer
            .is_locked(&self.key)
            .expect("the observer reaches the primary");
        let audit = Arc::new(Mutex::new(Audit::default()));
        let acquired = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let workers: Vec<_> = (0..THREADS)
            .map(|id| {
                let (backend, audit, acquired, stop) = (
                    Arc::clone(&backend),
                    Arc::clone(&audit),
                    Arc::clone(&acquired),
                    Arc::clone(&stop),
                );
                let key = self.key.clone();
                std::thread::spawn(move || contend(id, &backend, &key, &audit, &acquired, &stop))
            })
            .collect();

        let await_rounds = |what: &str, from: usize| {
            let deadline = Instant::now() + Duration::from_secs(90);
            while acquired.load(Ordering::SeqCst) < from + ROUNDS {
                let audit = audit.lock().unwrap();
                assert!(
                    Instant::now() < deadline,
                    "operations did not {what}: {} acquisitions; last errors: {:?}",
                    acquired.load(Ordering::SeqCst),
                    &audit.errors[audit.errors.len().saturating_sub(5)..]
                );
                drop(audit);
                std::thread::sleep(Duration::from_millis(20));
            }
        };
        await_rounds("start", 0);
        topology.kill_primary();
        topology.await_promotion();
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(error) = observer.is_locked(&self.key) {
            assert!(error.code().is_transient(), "{error}");
            assert!(
                Instant::now() < deadline,
                "the observer did not find the new primary: {error}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        topology.restart_killed();
        await_rounds("resume", acquired.load(Ordering::SeqCst));
        stop.store(true, Ordering::SeqCst);
        for worker in workers {
            worker.join().expect("a contending thread panicked");
        }

        let audit = audit.lock().unwrap();
        let mut codes = std::collections::BTreeMap::<&str, usize>::new();
        for (code, _) in &audit.errors {
            *codes.entry(code.as_str()).or_default() += 1;
        }
        eprintln!(
            "failover run: {} acquisitions, errors by code {codes:?}, first errors {:?}",
            acquired.load(Ordering::SeqCst),
            &audit.errors[..audit.errors.len().min(3)]
        );
        assert!(
            audit.violations.is_empty(),
            "the lock was not exclusive, or fences did not grow:\n{}",
            audit.violations.join("\n")
        );
        let permanent: Vec<_> = audit
            .errors
            .iter()
            .filter(|(code, _)| !code.is_transient())
            .collect();
        assert!(
            permanent.is_empty(),
            "errors during the failover must be transient: {permanent:?}"
        );
        assert!(
            !audit.errors.is_empty(),
            "killing the primary went unnoticed: the test did not test a failover"
        );
    }
}

/// One contending thread: acquire, check in, check out, release; until told to stop.
fn contend(
    id: usize,
    backend: &RedisBackend,
    key: &str,
    audit: &Mutex<Audit>,
    acquired: &AtomicUsize,
    stop: &AtomicBool,
) {
    // Short leases: a release that a failover loses only blocks the key this long.
    let ttl = Duration::from_secs(3);
    while !stop.load(Ordering::SeqCst) {
        match backend.acquire(key, ttl) {
            Ok(AcquireOutcome::Acquired(lease)) => {
                {
                    let mut audit = audit.lock().unwrap();
                    if let Some(other) = audit.holder {
                        audit
                            .violations
                            .push(format!("thread {id} acquired while thread {other} held"));
                    }
                    let fence = lease.fence.value();
                    if audit.last_fence.is_some_and(|last| fence <= last) {
                        let last = audit.last_fence;
                        audit
                            .violations
                            .push(format!("fence {fence} after fence {last:?}"));
                    }
                    audit.holder = Some(id);
                    audit.last_fence = Some(fence);
                }
                std::thread::yield_now();
                audit.lock().unwrap().holder = None;
                acquired.fetch_add(1, Ordering::SeqCst);
                if let Err(error) = backend.release(&lease.lock_id) {
                    audit
                        .lock()
                        .unwrap()
                        .errors
                        .push((error.code(), error.to_string()));
                }
            }
            Ok(AcquireOutcome::Locked) => std::thread::sleep(Duration::from_millis(1)),
            Err(error) => {
                audit
                    .lock()
                    .unwrap()
                    .errors
                    .push((error.code(), error.to_string()));
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
