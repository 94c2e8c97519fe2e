//! The integration tests, in one binary: a module per area, and the servers and fault tools
//! they share in `support`. Every backend runs the contract suites the crate ships
//! (`syncguard::backend_contract!`, `syncguard::guard_contract!`, feature `testing`).
//!
//! One binary compiles `support` once and starts each shared server (Redis,
//! PostgreSQL, PgBouncer, the Firestore emulator) once for all areas; tests that stop or
//! restart a server start one of their own. Every test works on keys of its own, so areas run
//! side by side on the shared servers. `cargo test --test it redis::` runs one area.

mod support;

/// For each `check`, a module of that name with the `#[test]`s `on_redis` and `on_postgres`,
/// each running `check` against the shared server (`redis_url()` / `pg_url()` in the module that
/// invokes it). Defined before the modules that use it: `cli`, `cli_metrics`, `cli_verbose`.
#[cfg(feature = "cli")]
macro_rules! on_redis_and_postgres {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            #[test]
            fn on_redis() {
                super::$check(&super::redis_url());
            }

            #[test]
            fn on_postgres() {
                super::$check(&super::pg_url());
            }
        }
    )*};
}

/// One `#[test]` per store of [`cli_store::Store`] for each check `fn(&Store)`: Redis, a Redis
/// Cluster, PostgreSQL, PgBouncer and the Firestore emulator.
#[cfg(feature = "cli")]
macro_rules! on_every_store {
    ($($check:ident),* $(,)?) => {$(
        mod $check {
            use crate::cli_store::Store;

            #[test]
            fn on_redis() {
                super::$check(&Store::redis());
            }

            #[test]
            fn on_a_redis_cluster() {
                super::$check(&Store::redis_cluster());
            }

            #[test]
            fn on_postgres() {
                super::$check(&Store::postgres());
            }

            #[test]
            fn through_pgbouncer() {
                super::$check(&Store::pgbouncer());
            }

            #[test]
            fn on_firestore() {
                super::$check(&Store::firestore());
            }
        }
    )*};
}

// The multi-process audits: first by name, so that libtest, which starts tests in name order,
// starts its longest tests first and fills the end of the run with short ones.
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
mod audits;
#[cfg(all(feature = "redis", feature = "postgres", feature = "firestore"))]
mod chaos;
// `cli` brings every backend.
#[cfg(feature = "cli")]
mod cli;
#[cfg(feature = "cli")]
mod cli_break;
#[cfg(feature = "cli")]
mod cli_faults;
#[cfg(feature = "cli")]
mod cli_input;
#[cfg(feature = "cli")]
mod cli_leader;
#[cfg(feature = "cli")]
mod cli_line;
#[cfg(feature = "cli")]
mod cli_lost_answer;
#[cfg(feature = "cli")]
mod cli_metrics;
#[cfg(feature = "cli")]
mod cli_multi;
#[cfg(feature = "cli")]
mod cli_shared;
#[cfg(feature = "cli")]
mod cli_store;
#[cfg(feature = "cli")]
mod cli_verbose;
#[cfg(feature = "cli")]
mod cli_watch;
#[cfg(all(feature = "redis", feature = "postgres", feature = "firestore"))]
mod clock_skew;
mod docs;
#[cfg(feature = "firestore")]
mod firestore;
#[cfg(feature = "firestore")]
mod firestore_auth;
#[cfg(feature = "firestore")]
mod firestore_breaking;
#[cfg(feature = "firestore")]
mod firestore_in_doubt;
#[cfg(feature = "firestore")]
mod firestore_list;
#[cfg(feature = "firestore")]
mod firestore_multi;
#[cfg(feature = "firestore")]
mod firestore_records;
#[cfg(feature = "firestore")]
mod firestore_semaphores;
#[cfg(feature = "firestore")]
mod firestore_shapes;
#[cfg(feature = "firestore")]
mod firestore_shared;
#[cfg(feature = "firestore")]
mod firestore_trace;
mod fuzz;
#[cfg(target_os = "linux")]
mod heartbeat_threads;
#[cfg(all(feature = "redis", feature = "postgres", feature = "firestore"))]
mod hostile;
#[cfg(all(unix, feature = "redis", feature = "postgres"))]
mod leaders;
mod memory;
#[cfg(feature = "postgres")]
mod pgbouncer;
#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "postgres")]
mod postgres_breaking;
#[cfg(feature = "postgres")]
mod postgres_errors;
#[cfg(feature = "postgres")]
mod postgres_fences;
#[cfg(feature = "postgres")]
mod postgres_legacy;
#[cfg(feature = "postgres")]
mod postgres_line;
#[cfg(feature = "postgres")]
mod postgres_multi;
#[cfg(feature = "postgres")]
mod postgres_semaphores;
#[cfg(feature = "postgres")]
mod postgres_shared;
#[cfg(feature = "redis")]
mod redis;
#[cfg(feature = "redis")]
mod redis_breaking;
#[cfg(feature = "redis")]
mod redis_cluster;
#[cfg(feature = "redis")]
mod redis_cluster_pipelines;
#[cfg(feature = "redis")]
mod redis_deployment_errors;
#[cfg(feature = "redis")]
mod redis_line;
#[cfg(feature = "redis")]
mod redis_list;
#[cfg(feature = "redis")]
mod redis_multi;
#[cfg(feature = "redis")]
mod redis_records;
#[cfg(feature = "redis")]
mod redis_renewals;
#[cfg(feature = "redis")]
mod redis_repeats;
#[cfg(feature = "redis")]
mod redis_semaphores;
#[cfg(feature = "redis")]
mod redis_sentinel;
#[cfg(feature = "redis")]
mod redis_shared;
#[cfg(feature = "redis")]
mod redis_stalls;
mod storage_keys;
mod structure;
#[cfg(any(feature = "redis", feature = "postgres", feature = "firestore"))]
mod tls;
mod wake;
#[cfg(all(feature = "redis", feature = "postgres"))]
mod watch_faults;
