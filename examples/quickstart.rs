//! A five-minute tour of syncguard: guards, fences, contention, `with_lock`, extending, the
//! heartbeat, and releasing.
//!
//! Run it with no servers at all (locks live in this process, in a `MemoryBackend`):
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! or point it at a real store through `SYNCGUARD_URL`, for example:
//!
//! ```text
//! SYNCGUARD_URL=redis://127.0.0.1/ cargo run --example quickstart
//! ```
//!
//! It takes about three seconds (one step waits out a short lease on purpose).

use std::thread;
use std::time::Duration;

use syncguard::{Heartbeat, LockBackend, LockError, LockOptions, Locker, TimeAuthority};

fn main() -> Result<(), LockError> {
    // A backend and a locker. `memory:` is a `MemoryBackend`: locks that live in this process.
    // `Locker` is cheap to clone; clones share its heartbeat (one scheduler thread and a few
    // renewal workers, however many guards).
    let url = std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "memory:".into());
    let backend = syncguard::connect(&url)?;
    // Whose clock decides when a lease has run out: the store's (Redis, PostgreSQL), or this
    // machine's (memory, Firestore), which must then be kept in sync with the other clients'.
    let expiry_clock = match backend.capabilities().time_authority {
        TimeAuthority::Server => "the store's clock",
        TimeAuthority::Client => "this machine's clock",
    };
    println!(
        "backend: {}, leases expire by {expiry_clock}",
        backend.capabilities().backend
    );
    let locker = Locker::new(backend);

    // A fresh key per run, so runs against a shared server never meet.
    let run = &syncguard::driver::generate_lock_id()[..8];
    let key = format!("quickstart:{run}:report");

    // 1. Take the lock. Like `Mutex::lock`, `lock` waits as long as someone else holds it
    //    (a release wakes it; meanwhile it polls with capped backoff). To bound the wait, use
    //    `try_lock_for(key, timeout)`, or `lock_with` and `LockOptions::default().timeout(..)`.
    //    The fence is the token to hand to whatever the lock protects.
    let guard = locker.lock(&key)?;
    println!("\n1. locked {:?}, fence {}", guard.key(), guard.fence());
    let mut fences = vec![*guard.fence()];

    // 2. While we hold it, nobody else gets it: `try_lock` answers `None` instead of waiting.
    let other = locker.clone();
    let other_key = key.clone();
    let attempt = thread::spawn(move || other.try_lock(&other_key))
        .join()
        .expect("the other thread panicked")?;
    println!(
        "2. another thread's try_lock: {}",
        if attempt.is_none() {
            "None (busy)"
        } else {
            "Some (?!)"
        }
    );
    assert!(attempt.is_none());

    // 3. Extend the lease by hand (the heartbeat usually does this for you).
    let before = guard.expires_at_ms();
    let extended = guard.extend(Duration::from_secs(60))?;
    println!(
        "3. extended to 60 s: {extended}; expiry moved {} ms later",
        guard.expires_at_ms() - before
    );

    // 4. Release explicitly to learn the outcome (dropping the guard releases too).
    let released = guard.release()?;
    println!("4. released: {released}");

    // 5. `with_lock`: acquire, run the closure, always release, even if it panics.
    let fence = locker.with_lock(&key, |guard| {
        println!("5. inside with_lock, fence {}", guard.fence());
        *guard.fence()
    })?;
    fences.push(fence);

    // 6. The heartbeat. This lease lasts only 600 ms, but the heartbeat renews it every 200 ms,
    //    so it is still ours after 2.5 s. For contrast, a second lease with the heartbeat off
    //    runs out on its own.
    let short = LockOptions::default().ttl(Duration::from_millis(600));
    let kept = locker.lock_with(&key, &short)?;
    let unkept_key = format!("quickstart:{run}:no-heartbeat");
    let unkept = locker.lock_with(&unkept_key, &short.clone().heartbeat(Heartbeat::Off))?;
    println!("6. holding two 600 ms leases for 2.5 s, one with the heartbeat, one without ...");
    thread::sleep(Duration::from_millis(2500));

    let still_owned = syncguard::owns(locker.backend(), kept.lock_id())?;
    println!(
        "   with heartbeat:    owned = {still_owned}, check() = {:?}",
        kept.check()
    );
    assert!(still_owned);
    kept.check()?;
    match unkept.check() {
        Err(e) => println!("   without heartbeat: check() = Err({})", e.code()),
        Ok(()) => println!("   without heartbeat: check() = Ok(()) (unexpected)"),
    }
    assert!(unkept.is_lost());
    fences.push(*kept.fence());
    kept.release()?;
    drop(unkept); // already lost: nothing left to release

    // 7. Fences only grow: every acquisition of the key got a larger one. A store that
    //    rejects writes carrying a fence lower than the highest it has seen is safe from a
    //    holder that stalled past its lease.
    let guard = locker.lock(&key)?;
    fences.push(*guard.fence());
    let shown: Vec<String> = fences.iter().map(|f| f.to_string()).collect();
    println!("7. fences of the four acquisitions: {}", shown.join(" < "));
    assert!(fences.windows(2).all(|pair| pair[0] < pair[1]));
    drop(guard); // released here

    println!("\ndone: every lock is released");
    Ok(())
}
