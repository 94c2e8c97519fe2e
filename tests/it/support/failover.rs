//! A failover in the middle of contention, audited: threads contend for one key on a
//! deployment (Cluster or Sentinel) while its primary is killed, a replica takes over and the
//! dead node comes back. Every holder marks its entry and exit in a shared [`LeaseAudit`], so
//! the test sees two holders at once, a fence that does not grow, an untyped or permanent error,
//! or operations that never resume.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use syncguard::redis::RedisBackend;
use syncguard::{AcquireOutcome, LockBackend};

use super::lease_audit::LeaseAudit;

/// What a deployment does for the run.
pub trait Topology {
    /// Kills (SIGKILL) the primary that holds the contended key.
    fn kill_primary(&mut self);
    /// Waits until a replica serves the key in its place.
    fn await_promotion(&mut self);
    /// Starts the killed node again (it rejoins as a replica) and waits until it has.
    fn restart_killed(&mut self);
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
/// Short leases: a release that a failover loses only blocks the key this long.
const LEASE: Duration = Duration::from_secs(3);
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
        let audit = Arc::new(LeaseAudit::new(LEASE));
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
                assert!(
                    Instant::now() < deadline,
                    "operations did not {what}: {} acquisitions; last errors: {:?}",
                    acquired.load(Ordering::SeqCst),
                    audit.last_errors(5)
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            audit.note(&format!("{ROUNDS} acquisitions: operations did {what}"));
        };
        await_rounds("start", 0);
        topology.kill_primary();
        audit.note("the primary was killed");
        topology.await_promotion();
        audit.note("a replica was promoted");
        let deadline = Instant::now() + Duration::from_secs(60);
        while let Err(error) = observer.is_locked(&self.key) {
            assert!(error.code().is_transient(), "{error}");
            assert!(
                Instant::now() < deadline,
                "the observer did not find the new primary: {error}"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        audit.note("the observer found the new primary");
        topology.restart_killed();
        audit.note("the killed node is back, as a replica");
        await_rounds("resume", acquired.load(Ordering::SeqCst));
        stop.store(true, Ordering::SeqCst);
        for worker in workers {
            worker.join().expect("a contending thread panicked");
        }

        let errors = audit.errors();
        let mut codes = std::collections::BTreeMap::<&str, usize>::new();
        for (code, _) in &errors {
            *codes.entry(code.as_str()).or_default() += 1;
        }
        let stale = audit.stale_holders();
        eprintln!(
            "failover run: {} acquisitions, errors by code {codes:?}, first errors {:?}; \
             the oldest lease to leave: {}; {} overlaps of holders explained by expired leases{}",
            audit.entries(),
            &errors[..errors.len().min(3)],
            audit.oldest_exit(),
            stale.len(),
            stale
                .iter()
                .take(5)
                .map(|s| format!("\n  stale holder: {s}"))
                .collect::<String>()
        );
        let violations = audit.violations();
        assert!(
            violations.is_empty(),
            "the lock was not exclusive, or fences did not grow (lease TTL {LEASE:?}); {} \
             violations, the first ones:\n{}",
            violations.len(),
            violations[..violations.len().min(3)].join("\n")
        );
        let permanent: Vec<_> = errors
            .iter()
            .filter(|(code, _)| !code.is_transient())
            .collect();
        assert!(
            permanent.is_empty(),
            "errors during the failover must be transient: {permanent:?}"
        );
        assert!(
            !errors.is_empty(),
            "killing the primary went unnoticed: the test did not test a failover"
        );
    }
}

/// One contending thread: acquire, check in, check out, release; until told to stop.
fn contend(
    id: usize,
    backend: &RedisBackend,
    key: &str,
    audit: &LeaseAudit,
    acquired: &AtomicUsize,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::SeqCst) {
        let asked = Instant::now();
        match backend.acquire(key, LEASE) {
            Ok(AcquireOutcome::Acquired(lease)) => {
                audit.enter(id, &lease, asked.elapsed());
                std::thread::yield_now();
                audit.exit(id);
                acquired.fetch_add(1, Ordering::SeqCst);
                match backend.release(&lease.lock_id) {
                    Ok(true) => {}
                    Ok(false) => audit.note(&format!(
                        "thread {id}: fence {} was no longer held when released",
                        lease.fence.value()
                    )),
                    Err(error) => audit.error(id, error.code(), error.to_string()),
                }
            }
            Ok(AcquireOutcome::Locked) => std::thread::sleep(Duration::from_millis(1)),
            Err(error) => {
                audit.error(id, error.code(), error.to_string());
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}
