//! Locks in Redis, step by step: connecting, what is stored, fencing, contention between two
//! services, and what the heartbeat does for a long job.
//!
//! ```text
//! redis-server --port 6379 &            # or any Redis 6.2+ you have
//! cargo run --example redis             # uses redis://127.0.0.1:6379/
//! SYNCGUARD_URL=redis://:password@host:6379/0?prefix=myapp cargo run --example redis
//! ```

use std::thread;
use std::time::Duration;

use syncguard::redis::RedisBackend;
use syncguard::{Heartbeat, LockBackend, LockOptions, Locker};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {}: {}", error.code(), error.message());
        std::process::exit(1);
    }
}

fn run() -> syncguard::Result<()> {
    let url = std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());

    // Connecting checks the address and the password at once. Timeouts, pool size and the key
    // prefix have builder options: RedisBackend::builder().url(..).pool_size(16).build().
    let backend = RedisBackend::connect(&url)?;
    println!("connected: {backend:?}");
    let locker = Locker::new(backend);
    let key = format!(
        "example:report:{}",
        &syncguard::driver::generate_lock_id()[..6]
    );

    // 1. A lock is three Redis keys, written by one Lua script with Redis TIME as the clock.
    let guard = locker.lock(&key)?;
    let backend = locker.backend();
    println!("\n1. locked {key:?} with fence {}", guard.fence());
    println!("   lock record:   {}", backend.lock_key(&key)?);
    println!("   reverse index: {}", backend.index_key(guard.lock_id())?);
    println!(
        "   fence counter: {} (never expires)",
        backend.fence_key(&key)?
    );

    // 2. Another service (another Locker, as if in another process) finds it held.
    let other = Locker::new(RedisBackend::connect(&url)?);
    println!(
        "\n2. other service's try_lock: {:?}",
        other.try_lock(&key)?.map(|_| ())
    );

    // 3. The fence is what makes a lock safe to rely on: pass it with every write, and have the
    //    store refuse writes with a fence lower than the last one it accepted.
    let first_fence = *guard.fence();
    drop(guard); // released
    let second = other.lock(&key)?;
    println!(
        "\n3. next holder's fence {} > {}: {}",
        second.fence(),
        first_fence,
        second.fence() > &first_fence
    );
    drop(second);

    // 4. A long job: a 3 s lease renewed every second by the shared heartbeat thread.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(3))
        .heartbeat(Heartbeat::Every(Duration::from_secs(1)))
        .on_lock_lost(|e| eprintln!("   lease lost: {e}"));
    let job = locker.lock_with(&key, &options)?;
    let started = job.expires_at_ms();
    println!("\n4. job running under a 3 s lease ...");
    for step in 1..=4 {
        thread::sleep(Duration::from_millis(1200));
        job.check()?; // stop working the moment the lease is gone
        println!(
            "   step {step}: still held, expiry moved {} ms",
            job.expires_at_ms() - started
        );
    }
    println!("   released: {}", job.release()?);

    // 5. Diagnostics without side effects.
    println!("\n5. is_locked now: {}", locker.backend().is_locked(&key)?);
    Ok(())
}
