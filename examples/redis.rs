//! What is particular to locks in Redis: the connection options, the three keys a lock is
//! made of, Redis' own clock deciding expiry, and releases announced over pub/sub so that a
//! waiter in another process takes the lock at once.
//!
//! ```text
//! redis-server --port 6379 &            # or any Redis 6.2+ you have
//! cargo run --example redis             # uses redis://127.0.0.1:6379/
//! SYNCGUARD_URL=rediss://:password@host:6380/0?prefix=myapp cargo run --example redis
//! ```
//!
//! What every backend shares (waiting, fences, the heartbeat, `with_lock`) is the quickstart's
//! tour, which runs against Redis as well:
//! `SYNCGUARD_URL=redis://127.0.0.1:6379/ cargo run --example quickstart`.

use std::thread;
use std::time::{Duration, Instant};

use syncguard::redis::RedisBackend;
use syncguard::{Jitter, LockBackend, LockOptions, Locker};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {}: {}", error.code(), error.message());
        std::process::exit(1);
    }
}

fn run() -> syncguard::Result<()> {
    let url = std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379/".into());

    // `RedisBackend::connect(&url)` takes the defaults; the builder sets the rest. Every call
    // has a deadline, the heartbeat's renewals included: a renewal stuck longer than the lease
    // would be lost anyway. The key prefix comes from `?prefix=` (default `syncguard`, the one
    // Node services using the TypeScript SyncGuard share locks under). Building opens one
    // connection, so a wrong address or password fails here, not at the first lock.
    let backend = RedisBackend::builder()
        .url(&url)
        .pool_size(4)
        .connect_timeout(Duration::from_secs(1))
        .read_timeout(Duration::from_secs(1))
        .write_timeout(Duration::from_secs(1))
        .build()?;
    println!("connected: {backend:?}");
    // Redis decides expiry with its own `TIME`, inside the Lua scripts: the clients' clocks
    // may disagree with each other and with the server without shortening anyone's lease.
    println!("clock: {:?}", backend.capabilities().time_authority);

    let locker = Locker::new(backend);
    let run = &syncguard::driver::generate_lock_id()[..6];
    let key = format!("example:report:{run}");

    // A lock is three keys, written together by one script. Look at them with `redis-cli`
    // while a lock is held: `GET <lock key>`, `PTTL <lock key>`.
    let guard = locker.lock(&key)?;
    let stored = locker.backend();
    println!("\nlocked {key:?} with fence {}; in Redis:", guard.fence());
    println!(
        "  {:<48} JSON record, expires with the lease",
        stored.lock_key(&key)?
    );
    println!(
        "  {:<48} lock id -> lock key, for release and extend",
        stored.index_key(guard.lock_id())?
    );
    // The counter must outlive every lease, or fences would start again at 1.
    println!(
        "  {:<48} fence counter, never expires",
        stored.fence_key(&key)?
    );

    // Releases are announced: the release script PUBLISHes the key on `<lock key>:released`.
    // A Locker that has to wait subscribes (one connection, opened on its first wait) and tries
    // again as soon as it hears, instead of at its next poll. Here the waiter, as if in another
    // process, polls only every 5 s, yet gets the lock a moment after the release.
    // Locks that simply expire, and releases by TypeScript peers, are still found by polling.
    let waiter = Locker::new(RedisBackend::connect(&url)?);
    let slow_polling = LockOptions::default()
        .retry_delay(Duration::from_secs(5))
        .max_retry_delay(Duration::from_secs(5))
        .jitter(Jitter::None);
    let wake_ms = thread::scope(|scope| {
        let waiting = scope.spawn(|| {
            let guard = waiter.lock_with(&key, &slow_polling)?;
            let acquired = Instant::now();
            guard.release()?;
            Ok::<_, syncguard::LockError>(acquired)
        });
        thread::sleep(Duration::from_millis(500)); // time for its first attempt and subscription
        let released = Instant::now();
        guard.release()?;
        let acquired = waiting.join().expect("the waiter panicked")?;
        Ok::<_, syncguard::LockError>(acquired.saturating_duration_since(released).as_millis())
    })?;
    println!("\nreleased; the waiter polling every 5 s had the lock {wake_ms} ms later");

    // The URL may hold a password: not printed.
    println!(
        "\nnext, what every backend does: SYNCGUARD_URL=<this URL> cargo run --example quickstart"
    );
    Ok(())
}
