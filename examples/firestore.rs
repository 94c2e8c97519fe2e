//! Locks in Firestore, step by step: connecting (emulator or a real project), the documents,
//! fencing, and a long job kept alive by the heartbeat.
//!
//! ```text
//! # Google's emulator (the Cloud SDK's cloud-firestore-emulator component):
//! gcloud emulators firestore start --host-port=127.0.0.1:8080 &
//! FIRESTORE_EMULATOR_HOST=127.0.0.1:8080 cargo run --example firestore
//!
//! # A real project, with a service-account key (or on GCE / Cloud Run, the metadata server):
//! GOOGLE_APPLICATION_CREDENTIALS=key.json SYNCGUARD_URL=firestore://my-project cargo run --example firestore
//! ```

use std::thread;
use std::time::Duration;

use syncguard::firestore::FirestoreBackend;
use syncguard::{Heartbeat, LockBackend, LockOptions, Locker};

fn main() {
    if let Err(error) = run() {
        eprintln!("error: {}: {}", error.code(), error.message());
        std::process::exit(1);
    }
}

fn run() -> syncguard::Result<()> {
    let url =
        std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "firestore://syncguard-example".into());
    // Nothing is sent yet: the first operation reports a wrong endpoint or credentials.
    let backend = FirestoreBackend::connect(&url)?;
    let locker = Locker::new(backend);
    let key = format!(
        "example:report:{}",
        &syncguard::driver::generate_lock_id()[..6]
    );

    // 1. A lock is a document in `locks`, its fence counter one in `fence_counters` (never
    //    deleted). Every change is an atomic compare-and-set commit: at most two requests.
    let guard = locker.lock(&key)?;
    let backend = locker.backend();
    println!("1. locked {key:?} with fence {}", guard.fence());
    println!("   locks/{}", backend.lock_document_id(&key)?);
    println!("   fence_counters/{}", backend.fence_document_id(&key)?);

    // 2. Firestore decides nothing about time: this machine's clock does, so it is watched.
    println!(
        "2. clock skew against Firestore: {:?}",
        backend.clock_skew()
    );

    // 3. The next holder gets a larger fence.
    let first = *guard.fence();
    drop(guard);
    let second = locker.lock(&key)?;
    println!("3. next holder's fence {} > {first}", second.fence());
    drop(second);

    // 4. A long job under a short lease, renewed by the heartbeat thread.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(3))
        .heartbeat(Heartbeat::Every(Duration::from_secs(1)))
        .on_lock_lost(|e| eprintln!("   lease lost: {e}"));
    let job = locker.lock_with(&key, &options)?;
    println!("4. job running under a 3 s lease ...");
    for step in 1..=3 {
        thread::sleep(Duration::from_millis(1200));
        job.check()?;
        println!("   step {step}: still held");
    }
    println!("   released: {}", job.release()?);
    println!(
        "5. is_locked now: {}; {:?}",
        locker.backend().is_locked(&key)?,
        locker.backend().stats()
    );
    Ok(())
}
