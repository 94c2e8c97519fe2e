//! A batch job run by several workers at once: every item is processed under its own lock,
//! exactly once per round, and every write carries the lock's fence to a store that rejects
//! writes older than the last one it accepted.
//!
//! Run it with no servers at all (locks live in this process, in a `MemoryBackend`):
//!
//! ```text
//! cargo run --example batch_job
//! ```
//!
//! or point the workers at a real store through `SYNCGUARD_URL`, for example:
//!
//! ```text
//! SYNCGUARD_URL=redis://127.0.0.1/ cargo run --example batch_job
//! ```
//!
//! It takes a few seconds: the last part waits out a short lease on purpose.

use std::collections::HashMap;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use syncguard::{Heartbeat, LockBackend, LockError, LockOptions, Locker};

const WORKERS: usize = 4;
const ITEMS: usize = 8;
const ROUNDS: usize = 3;

/// The resource the locks protect: a table of item id → (fence, value). It accepts a write only
/// if its fence is not lower than the one stored with the item — the check a real database does
/// with `UPDATE … WHERE fence <= $fence`.
#[derive(Default)]
struct FencedStore {
    rows: Mutex<HashMap<String, (u64, String)>>,
}

/// A write the store refused: a newer lock holder has written since.
#[derive(Debug)]
struct StaleWrite {
    offered: u64,
    stored: u64,
}

impl FencedStore {
    fn write(&self, id: &str, fence: u64, value: String) -> Result<(), StaleWrite> {
        let mut rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(stored, _)) = rows.get(id)
            && fence < stored
        {
            return Err(StaleWrite {
                offered: fence,
                stored,
            });
        }
        rows.insert(id.to_owned(), (fence, value));
        Ok(())
    }

    fn read(&self, id: &str) -> Option<(u64, String)> {
        let rows = self.rows.lock().unwrap_or_else(|e| e.into_inner());
        rows.get(id).cloned()
    }
}

/// What a worker did with one item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    /// Processed it and the store accepted the result.
    Wrote,
    /// Another worker had already processed it this round.
    AlreadyDone,
    /// The lease was lost before writing, so nothing was written.
    LeaseLost,
    /// The store refused the write: a newer holder had written.
    Rejected,
}

/// The value an item gets in `round`; its prefix tells whether the round is done for it.
fn round_marker(round: usize) -> String {
    format!("round {round}:")
}

/// One worker's pass over the items, starting at a different item per worker so that they
/// meet on every key.
fn work(
    locker: &Locker<Box<dyn LockBackend>>,
    store: &FencedStore,
    worker: usize,
    round: usize,
    items: &[String],
) -> Result<Vec<(String, Outcome)>, LockError> {
    let mut log = Vec::new();
    for offset in 0..items.len() {
        let id = &items[(worker * 3 + offset) % items.len()];
        let outcome = locker.with_lock(&format!("item:{id}"), |guard| {
            // Under the lock: has someone processed this item in this round already?
            if store
                .read(id)
                .is_some_and(|(_, value)| value.starts_with(&round_marker(round)))
            {
                return Outcome::AlreadyDone;
            }
            // The "work". A real job would call out to something slow here.
            thread::sleep(Duration::from_millis(5));
            let value = format!("{} processed by worker {worker}", round_marker(round));
            // Do not write without the lease; and let the store judge the fence anyway.
            if guard.check().is_err() {
                return Outcome::LeaseLost;
            }
            match store.write(id, guard.fence().value(), value) {
                Ok(()) => Outcome::Wrote,
                Err(_) => Outcome::Rejected,
            }
        })?;
        log.push((id.clone(), outcome));
    }
    Ok(log)
}

fn main() -> Result<(), LockError> {
    // `memory:` (the default) keeps the locks in this process: the workers are threads.
    let url = std::env::var("SYNCGUARD_URL").unwrap_or_else(|_| "memory:".into());
    let backend = syncguard::connect(&url)?;
    println!("backend: {}", backend.capabilities().backend);
    // The workers share one locker, hence one backend and one heartbeat.
    let locker = Locker::new(backend);
    let store = FencedStore::default();

    // A fresh tag per run, so runs against a shared server never meet.
    let run = &syncguard::driver::generate_lock_id()[..8];
    let items: Vec<String> = (1..=ITEMS).map(|n| format!("{run}-{n}")).collect();

    // 1. Rounds of WORKERS threads over the same items.
    for round in 1..=ROUNDS {
        let logs: Vec<Vec<(String, Outcome)>> = thread::scope(|scope| {
            let handles: Vec<_> = (0..WORKERS)
                .map(|worker| {
                    let (locker, store, items) = (&locker, &store, &items);
                    scope.spawn(move || work(locker, store, worker, round, items))
                })
                .collect();
            handles
                .into_iter()
                .map(|handle| handle.join().expect("a worker panicked"))
                .collect::<Result<_, _>>()
        })?;

        let mut writes: HashMap<&str, usize> = HashMap::new();
        let mut skipped = 0;
        for (id, outcome) in logs.iter().flatten() {
            match outcome {
                Outcome::Wrote => *writes.entry(id.as_str()).or_default() += 1,
                Outcome::AlreadyDone => skipped += 1,
                other => panic!("round {round}: item {id}: unexpected {other:?}"),
            }
        }
        for id in &items {
            assert_eq!(
                writes.get(id.as_str()),
                Some(&1),
                "round {round}: item {id} must be processed exactly once"
            );
        }
        let (fence, value) = store.read(&items[0]).expect("item 1 was written");
        println!(
            "round {round}: {ITEMS} items processed once each by {WORKERS} workers \
             ({skipped} visits found the item done); item {}: fence {fence}, {value:?}",
            items[0]
        );
    }

    // 2. A stalled holder. Worker A takes item 1 with a short lease and no heartbeat, checks
    //    its lease, then stalls (think: a long GC pause) until the lease has run out and
    //    worker B has taken the lock and written. A's late write carries an older fence, so
    //    the store rejects it.
    let id = &items[0];
    let key = format!("item:{id}");
    let short = LockOptions::default()
        .ttl(Duration::from_millis(300))
        .heartbeat(Heartbeat::Off);
    let stalled = locker.lock_with(&key, &short)?;
    stalled.check()?; // fine now...
    println!(
        "\nworker A holds {key:?} with fence {} for 300 ms, then stalls",
        stalled.fence()
    );

    // ...meanwhile worker B waits for the lock (it frees once the lease and the 1 s liveness
    // tolerance have passed), then writes with its newer fence.
    let patient = LockOptions::default().timeout(Duration::from_secs(10));
    let b_outcome = thread::scope(|scope| {
        scope
            .spawn(|| -> Result<Outcome, LockError> {
                let guard = locker.lock_with(&key, &patient)?;
                guard.check()?;
                let fence = guard.fence().value();
                let outcome = match store.write(id, fence, "written by worker B".to_owned()) {
                    Ok(()) => Outcome::Wrote,
                    Err(_) => Outcome::Rejected,
                };
                println!("worker B took the lock with fence {fence}: {outcome:?}");
                guard.release()?;
                Ok(outcome)
            })
            .join()
            .expect("worker B panicked")
    })?;
    assert_eq!(b_outcome, Outcome::Wrote);

    // A wakes up and writes without checking again: the store refuses it.
    match store.write(
        id,
        stalled.fence().value(),
        "written by worker A".to_owned(),
    ) {
        Ok(()) => panic!("the store accepted a stale write"),
        Err(StaleWrite { offered, stored }) => println!(
            "worker A's late write with fence {offered} rejected: the store has fence {stored}"
        ),
    }
    // Had A checked its lease first, it would have known not to write.
    assert!(stalled.check().is_err(), "A's lease is lost");
    println!(
        "worker A's check() now says: {}",
        stalled.check().unwrap_err()
    );
    drop(stalled); // lost already: nothing to release

    let (_, value) = store.read(id).expect("written");
    assert_eq!(value, "written by worker B");
    println!("\ndone: item {id} holds {value:?}");
    Ok(())
}
