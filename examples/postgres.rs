//! Locks in PostgreSQL, step by step: connecting, creating the tables, what is stored,
//! fencing, a second service, and a long job kept alive by the heartbeat.
//!
//! ```text
//! SYNCGUARD_URL=postgres://user:password@localhost:5432/app cargo run --example postgres
//! ```

use std::thread;
use std::time::Duration;

use syncguard::postgres::PostgresBackend;
use syncguard::{Heartbeat, LockBackend, LockOptions, Locker};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {}: {}", error.code(), error.message());
        std::process::exit(1);
    }
}

fn run() -> syncguard::Result<()> {
    let url = std::env::var("SYNCGUARD_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".into());

    // Connecting checks the server and the credentials at once. Options (table names, pool
    // size, timeouts) have builder methods: PostgresBackend::builder().url(..).build().
    let backend = PostgresBackend::connect(&url)?;
    // Creates the two tables and their indexes if missing; safe at every start-up. Teams that
    // migrate by hand apply src/postgres/schema.sql (syncguard::postgres::SCHEMA_SQL) instead.
    backend.setup_schema()?;
    println!("connected: {backend:?}");
    let locker = Locker::new(backend);
    let key = format!(
        "example:report:{}",
        &syncguard::driver::generate_lock_id()[..6]
    );

    // 1. One statement per operation; the lock is a row, the fence a counter row that is
    //    never deleted. PostgreSQL's clock decides expiry.
    let guard = locker.lock(&key)?;
    println!("\n1. locked {key:?} with fence {}", guard.fence());
    println!("   row key:   {}", locker.backend().storage_key(&key)?);
    println!("   fence key: {}", locker.backend().fence_key(&key)?);

    // 2. Another service finds it held.
    let other = Locker::new(PostgresBackend::connect(&url)?);
    println!(
        "\n2. other service's try_lock: {:?}",
        other.try_lock(&key)?.map(|_| ())
    );

    // 3. The next holder gets a larger fence: pass it with your writes.
    let first_fence = *guard.fence();
    drop(guard);
    let second = other.lock(&key)?;
    println!(
        "\n3. next holder's fence {} > {first_fence}",
        second.fence()
    );
    drop(second);

    // 4. A long job under a short lease, renewed by the heartbeat thread.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(3))
        .heartbeat(Heartbeat::Every(Duration::from_secs(1)))
        .on_lock_lost(|e| eprintln!("   lease lost: {e}"));
    let job = locker.lock_with(&key, &options)?;
    let started = job.expires_at_ms();
    println!("\n4. job running under a 3 s lease ...");
    for step in 1..=4 {
        thread::sleep(Duration::from_millis(1200));
        job.check()?;
        println!(
            "   step {step}: still held, expiry moved {} ms",
            job.expires_at_ms() - started
        );
    }
    println!("   released: {}", job.release()?);
    println!("\n5. is_locked now: {}", locker.backend().is_locked(&key)?);
    Ok(())
}
