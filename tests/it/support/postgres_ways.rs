//! The two ways the PostgreSQL areas reach the shared cluster: directly, and through the shared
//! PgBouncer (transaction mode). [`postgres_both_ways!`] makes each scenario a test both ways.

use syncguard::postgres::PostgresBackend;

use super::proxy::FaultProxy;
use super::{
    PG_PASSWORD, PG_USER, patient_postgres, shared_pgbouncer, shared_postgres_with_tables,
};

/// A backend on the shared cluster through the shared PgBouncer (transaction mode).
pub fn postgres_through_pgbouncer() -> PostgresBackend {
    shared_postgres_with_tables();
    let bouncer = shared_pgbouncer();
    patient_postgres(&bouncer.url())
        .build()
        .unwrap_or_else(|error| {
            panic!(
                "connecting through PgBouncer failed: {error}\nPgBouncer's log:\n{}",
                bouncer.log_tail()
            )
        })
}

/// The port of the shared cluster, its tables created.
pub fn postgres_port_direct() -> u16 {
    shared_postgres_with_tables().port
}

/// The port of the shared PgBouncer, the cluster's tables created (PgBouncer fronts it).
pub fn postgres_port_through_pgbouncer() -> u16 {
    shared_postgres_with_tables();
    shared_pgbouncer().port
}

/// A fault proxy in front of `upstream` (the cluster's or PgBouncer's port) and a backend
/// through it with a pool of one connection: an answer the proxy cuts is lost with the pool's
/// only connection, and the pool repeats the call on a fresh one.
pub fn postgres_through_a_proxy(upstream: u16) -> (FaultProxy, PostgresBackend) {
    let proxy = FaultProxy::start(std::net::SocketAddr::from(([127, 0, 0, 1], upstream)));
    let url = format!(
        "postgres://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{}/postgres",
        proxy.port()
    );
    let backend = patient_postgres(&url).pool_size(1).build().unwrap();
    (proxy, backend)
}

/// Each scenario, as a test on the shared cluster directly (in `mod direct`) and one through
/// the shared PgBouncer (in `mod through_pgbouncer`). The scenarios listed under `connect` take
/// how to connect (`fn() -> PostgresBackend`); those under `upstream` take the port to reach
/// (the cluster's or PgBouncer's), for a proxy of their own in between.
macro_rules! postgres_both_ways {
    (
        $(connect: [$($scenario:ident),* $(,)?] $(,)?)?
        $(upstream: [$($through_a_port:ident),* $(,)?] $(,)?)?
    ) => {
        mod direct {
            $($(#[test]
            fn $scenario() {
                super::$scenario(crate::support::shared_postgres_backend);
            })*)?
            $($(#[test]
            fn $through_a_port() {
                super::$through_a_port(crate::support::postgres_port_direct());
            })*)?
        }
        mod through_pgbouncer {
            $($(#[test]
            fn $scenario() {
                super::$scenario(crate::support::postgres_through_pgbouncer);
            })*)?
            $($(#[test]
            fn $through_a_port() {
                super::$through_a_port(crate::support::postgres_port_through_pgbouncer());
            })*)?
        }
    };
}
pub(crate) use postgres_both_ways;
