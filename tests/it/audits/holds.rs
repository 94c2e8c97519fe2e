//! Timed holds: what the reader-writer and semaphore audits share. Each worker thread takes a
//! hold a few times and logs, for every hold, whether it was a writer's, its fence and four times
//! on this machine's clock: when it asked, when its section started (after the grant), when the
//! section ended (before the release) and when the release returned. The parent starts the
//! workers on a store, reads the holds back, and checks their fences.

use std::path::PathBuf;
use std::time::Duration;

use super::workers::{self, Grant, append_log, fence_regressions, now_us, repeated_fences};
use crate::support;
use syncguard::driver::generate_lock_id;
use syncguard::{LockBackend, LockGuard, Locker};

const ENV_URL: &str = "SYNCGUARD_HOLDS_URL";
const ENV_DIR: &str = "SYNCGUARD_HOLDS_DIR";
const ENV_KEY: &str = "SYNCGUARD_HOLDS_KEY";
const ENV_THREADS: &str = "SYNCGUARD_HOLDS_THREADS";
const ENV_SECTIONS: &str = "SYNCGUARD_HOLDS_SECTIONS";

/// One hold as a worker logged it; times in µs since 1970 on this machine's clock.
#[derive(Clone, Copy, Debug)]
pub struct Hold {
    /// A writer's (exclusive) hold; a reader's or a permit otherwise.
    pub writer: bool,
    pub fence: u64,
    pub asked: u64,
    pub start: u64,
    pub end: u64,
    pub released: u64,
    /// Whether the release succeeded. A failed release leaves the hold to expire: the audit
    /// needs nothing from it (a later grant still gets a higher fence), so it is only counted.
    pub released_ok: bool,
}

// ---------------------------------------------------------------------------------------------
// The worker (runs in a child process)
// ---------------------------------------------------------------------------------------------

/// What the parent gave a worker process: where to log, the key, and how many threads take how
/// many holds each.
pub struct WorkerPlan {
    pub dir: PathBuf,
    pub key: String,
    threads: usize,
    sections: usize,
}

impl WorkerPlan {
    /// The plan in this process's environment, and a `Locker` on its store whose calls wait as
    /// an audit's threads do; `None` when the worker test runs in a normal run (ignored, or
    /// asked for by name), where it has nothing to do.
    pub fn from_env() -> Option<(WorkerPlan, Locker<Box<dyn LockBackend>>)> {
        let (Ok(url), Ok(dir)) = (std::env::var(ENV_URL), std::env::var(ENV_DIR)) else {
            return None;
        };
        let number = |name| std::env::var(name).unwrap().parse().unwrap();
        let locker =
            Locker::with_defaults(workers::connect_patiently(&url), workers::waiting_options());
        let plan = WorkerPlan {
            dir: PathBuf::from(dir),
            key: std::env::var(ENV_KEY).unwrap(),
            threads: number(ENV_THREADS),
            sections: number(ENV_SECTIONS),
        };
        Some((plan, locker))
    }

    /// Runs the plan's threads: each takes its holds one after another with `take(thread, n)`
    /// (whether it is a writer's, and the grant), holds each for a moment and logs it.
    pub fn hold_and_log(
        &self,
        take: impl Fn(usize, usize) -> (bool, syncguard::Result<LockGuard>) + Sync,
    ) {
        std::thread::scope(|scope| {
            for thread in 0..self.threads {
                let take = &take;
                scope.spawn(move || {
                    for n in 0..self.sections {
                        let asked = now_us();
                        let (writer, granted) = take(thread, n);
                        let guard = granted.unwrap_or_else(|error| panic!("not granted: {error}"));
                        let start = now_us();
                        // Long enough, next to an acquisition's round trips (tens of ms on the
                        // Firestore emulator), that sections of different threads overlap and
                        // the key is held full (20 ms × 96 sections: well under a second a run).
                        std::thread::sleep(Duration::from_millis(20));
                        let end = now_us();
                        let fence = guard.fence().value();
                        let released_ok = guard.release().is_ok();
                        let released = now_us();
                        append_log(
                            &self.dir,
                            &format!(
                                "{} {fence} {asked} {start} {end} {released} {}\n",
                                u8::from(writer),
                                u8::from(released_ok)
                            ),
                        );
                    }
                });
            }
        });
    }
}

// ---------------------------------------------------------------------------------------------
// The parent: the stores, the workers, the fence checks
// ---------------------------------------------------------------------------------------------

/// A store the audits run on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Store {
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "redis")]
    RedisCluster,
    #[cfg(feature = "postgres")]
    Postgres,
    #[cfg(feature = "postgres")]
    Pgbouncer,
    #[cfg(feature = "firestore")]
    Firestore,
}

impl Store {
    /// Its name in messages.
    pub fn name(self) -> &'static str {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis => "redis",
            #[cfg(feature = "redis")]
            Store::RedisCluster => "redis cluster",
            #[cfg(feature = "postgres")]
            Store::Postgres => "postgres",
            #[cfg(feature = "postgres")]
            Store::Pgbouncer => "pgbouncer",
            #[cfg(feature = "firestore")]
            Store::Firestore => "firestore",
        }
    }

    /// Whether it is the Firestore emulator, which every Firestore test shares: audits run
    /// fewer holds there.
    pub fn is_firestore(self) -> bool {
        #[cfg(feature = "firestore")]
        if self == Store::Firestore {
            return true;
        }
        false
    }

    /// The URL a worker connects to, and the environment it needs besides.
    fn target(self) -> (String, Vec<(&'static str, String)>) {
        match self {
            #[cfg(feature = "redis")]
            Store::Redis => (support::shared_redis().url(), Vec::new()),
            #[cfg(feature = "redis")]
            Store::RedisCluster => (support::shared_cluster().url(), Vec::new()),
            #[cfg(feature = "postgres")]
            Store::Postgres => (support::shared_postgres_with_tables().url(), Vec::new()),
            #[cfg(feature = "postgres")]
            Store::Pgbouncer => {
                // PgBouncer fronts the shared cluster: its tables must exist there.
                support::shared_postgres_with_tables();
                (support::shared_pgbouncer().url(), Vec::new())
            }
            // `firestore://PROJECT` talks to the emulator `FIRESTORE_EMULATOR_HOST` names.
            #[cfg(feature = "firestore")]
            Store::Firestore => (
                format!("firestore://{}", support::FIRESTORE_PROJECT),
                vec![(
                    "FIRESTORE_EMULATOR_HOST",
                    support::shared_firestore().host(),
                )],
            ),
        }
    }
}

/// How many worker processes an audit starts, and how many threads each runs.
const PROCESSES: usize = 8;
const THREADS: usize = 4;

/// An audit's worker processes: [`PROCESSES`] copies of the ignored test `worker_test`, each
/// with [`THREADS`] threads that take holds on a fresh key named after `name`, with `env`
/// besides.
pub struct Workers<'a> {
    pub name: &'static str,
    pub worker_test: &'static str,
    /// How many holds each thread takes: on Redis and PostgreSQL, and on the Firestore emulator,
    /// which every Firestore test shares (fewer there).
    pub sections: (usize, usize),
    pub env: &'a [(&'static str, String)],
}

impl Workers<'_> {
    /// How many holds each thread takes on `store`.
    fn sections_on(&self, store: Store) -> usize {
        if store.is_firestore() {
            self.sections.1
        } else {
            self.sections.0
        }
    }

    /// How many holds the workers are to take on `store` in all.
    pub fn planned(&self, store: Store) -> usize {
        PROCESSES * THREADS * self.sections_on(store)
    }

    /// Runs the workers on `store` and answers the holds they logged. (d) Fails unless every
    /// worker passed.
    pub fn run(&self, store: Store) -> Vec<Hold> {
        let dir = support::scratch_dir(self.name);
        let (url, store_env) = store.target();
        let mut env = vec![
            (ENV_URL, url),
            (ENV_DIR, dir.display().to_string()),
            (ENV_KEY, format!("{}:{}", self.name, generate_lock_id())),
            (ENV_THREADS, THREADS.to_string()),
            (ENV_SECTIONS, self.sections_on(store).to_string()),
        ];
        env.extend(store_env);
        env.extend(self.env.iter().cloned());
        workers::run_processes(self.worker_test, PROCESSES, &env, &dir, || {});
        let holds = parse_log(&workers::read_log(&dir));
        let _ = std::fs::remove_dir_all(&dir);
        holds
    }
}

fn parse_log(log: &str) -> Vec<Hold> {
    log.lines()
        .map(|line| {
            let fields: Vec<u64> = line
                .split(' ')
                .map(|field| {
                    field
                        .parse()
                        .unwrap_or_else(|_| panic!("a bad line: {line:?}"))
                })
                .collect();
            assert_eq!(fields.len(), 7, "a torn log line: {line:?}");
            Hold {
                writer: fields[0] == 1,
                fence: fields[1],
                asked: fields[2],
                start: fields[3],
                end: fields[4],
                released: fields[5],
                released_ok: fields[6] == 1,
            }
        })
        .collect()
}

/// What the fence checks found in a run's holds.
#[derive(Debug, Default)]
pub struct Fences {
    /// (b) Fences granted twice.
    pub repeated: Vec<u64>,
    /// (c) `(given back, later)`: `later` was asked for after `given back`'s release returned,
    /// yet its fence is not higher.
    pub regressions: Vec<(u64, u64)>,
}

impl Fences {
    pub fn of(holds: &[Hold]) -> Fences {
        let grants: Vec<Grant> = holds
            .iter()
            .map(|hold| Grant {
                fence: hold.fence,
                asked: hold.asked,
                released: hold.released,
            })
            .collect();
        Fences {
            repeated: repeated_fences(&grants),
            regressions: fence_regressions(&grants),
        }
    }

    /// Fails unless every fence was granted once and none went back.
    #[track_caller]
    pub fn assert_clean(&self, store: &str) {
        assert!(
            self.repeated.is_empty(),
            "{store}: fences granted twice: {}",
            first(&self.repeated)
        );
        assert!(
            self.regressions.is_empty(),
            "{store}: {} fences not above one given back before they were asked for, e.g. \
             (given back, later) {}",
            self.regressions.len(),
            first(&self.regressions)
        );
    }
}

/// The first few of `found`, for a failure message.
pub fn first<T: std::fmt::Debug>(found: &[T]) -> String {
    format!("{:?}", &found[..found.len().min(5)])
}

/// How many of `holds` failed to release.
pub fn failed_releases(holds: &[Hold]) -> usize {
    holds.iter().filter(|hold| !hold.released_ok).count()
}

/// One `#[test]` per [`Store`], each under its feature, calling `$run(store)`: `on_redis`,
/// `on_a_redis_cluster`, `on_postgres`, `through_pgbouncer` and `on_firestore`.
macro_rules! audit_on_every_store {
    ($run:ident) => {
        #[cfg(feature = "redis")]
        #[test]
        fn on_redis() {
            $run(super::holds::Store::Redis);
        }

        #[cfg(feature = "redis")]
        #[test]
        fn on_a_redis_cluster() {
            $run(super::holds::Store::RedisCluster);
        }

        #[cfg(feature = "postgres")]
        #[test]
        fn on_postgres() {
            $run(super::holds::Store::Postgres);
        }

        #[cfg(feature = "postgres")]
        #[test]
        fn through_pgbouncer() {
            $run(super::holds::Store::Pgbouncer);
        }

        #[cfg(feature = "firestore")]
        #[test]
        fn on_firestore() {
            $run(super::holds::Store::Firestore);
        }
    };
}
pub(crate) use audit_on_every_store;
