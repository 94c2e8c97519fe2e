//! What is particular to locks in PostgreSQL: the connection options, creating the tables
//! (at start-up or in a migration), the rows a lock is made of, the server's clock deciding
//! expiry, and running behind a connection pooler such as PgBouncer.
//!
//! ```text
//! SYNCGUARD_URL=postgres://user:password@localhost:5432/app cargo run --example postgres
//! # Through PgBouncer in transaction mode: the same, pointed at the pooler.
//! SYNCGUARD_URL=postgres://user:password@localhost:6432/app cargo run --example postgres
//! ```
//!
//! What every backend shares (waiting, fences, the heartbeat, `with_lock`) is the quickstart's
//! tour, which runs against PostgreSQL as well:
//! `SYNCGUARD_URL=postgres://user:password@localhost:5432/app cargo run --example quickstart`.

use std::time::Duration;

use syncguard::postgres::{PostgresBackend, schema_sql};
use syncguard::{LockBackend, Locker};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {}: {}", error.code(), error.message());
        std::process::exit(1);
    }
}

fn run() -> syncguard::Result<()> {
    let url = std::env::var("SYNCGUARD_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());

    // `PostgresBackend::connect(&url)` takes the defaults; the builder sets the rest. The
    // statement timeout is syncguard's own deadline on each call (it then cancels the
    // statement): no server-side `statement_timeout` is sent, because a pooler refuses that
    // startup parameter and a session setting would leak to its other clients. Building
    // opens one connection, so a wrong address or password fails here, not at the first lock.
    let backend = PostgresBackend::builder()
        .url(&url)
        .pool_size(4)
        .connect_timeout(Duration::from_secs(1))
        .statement_timeout(Duration::from_secs(2))
        .build()?;
    println!("connected: {backend:?}");

    // Creates what is missing, in one transaction that concurrent callers take turns at: safe
    // at every start-up. Teams that migrate by hand apply `SCHEMA_SQL` (the file
    // src/postgres/schema.sql), or `schema_sql(..)` for other table names (`?table=`,
    // `?fence_table=` or the builder). The tables are the TypeScript SyncGuard's; the
    // functions are this crate's alone (one plan cached per server connection; without them
    // the statements are sent inline).
    backend.setup_schema()?;
    println!("\nschema in place:");
    for line in schema_sql(backend.tables()).lines() {
        if line.starts_with("CREATE ") {
            println!("  {}", line.split('(').next().unwrap_or(line).trim_end());
        }
    }
    // The server's `clock_timestamp()` decides expiry: client clocks do not matter.
    println!("clock: {:?}", backend.capabilities().time_authority);

    // A lock is one row, deleted on release; its fence counter is another row, never deleted,
    // so fences keep growing across releases, expiries and restarts. Acquiring is a single
    // statement that also takes `pg_advisory_xact_lock(hashtext(key))`, as the TypeScript
    // SyncGuard does, so Rust and Node services on the same tables never both hold a key.
    let locker = Locker::new(backend);
    let key = format!(
        "example:report:{}",
        &syncguard::driver::generate_lock_id()[..6]
    );
    let tables = locker.backend().tables();
    let guard = locker.lock(&key)?;
    println!("\nlocked {key:?} with fence {}:", guard.fence());
    println!(
        "  {} row, key = {:?}",
        tables.lock_table(),
        locker.backend().storage_key(&key)?
    );
    println!(
        "  {} row, fence_key = {:?}",
        tables.fence_table(),
        locker.backend().fence_key(&key)?
    );
    drop(guard);
    println!("\nreleased; the counter row stays for the next holder's larger fence");

    // Behind PgBouncer, Supavisor or RDS Proxy in transaction mode nothing changes in the
    // code: each operation is one unnamed statement, hence one transaction, and the advisory
    // lock is transaction-scoped. Only waking differs: a release is announced with NOTIFY,
    // which a waiting Locker hears on one LISTEN connection, but LISTEN cannot work through
    // a transaction pooler, so there its waiters notice releases by polling. The quickstart
    // runs unchanged through one. (The URL may hold a password: not printed.)
    println!(
        "\nnext, what every backend does: SYNCGUARD_URL=<this URL> cargo run --example quickstart"
    );
    Ok(())
}
