//! The heartbeat: one scheduler thread per `Locker` renews every lease its guards hold.
//!
//! Leases wait in a min-heap ordered by their next renewal time; the thread sleeps until the
//! earliest one is due, renews it and puts it back. A lease whose guard released it is dropped
//! when it comes up (or earlier, when finished entries pile up), so holding N guards costs N
//! heap entries and no threads beyond the one.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::error::{LockError, Result};
use crate::locker::guard::Store;
use crate::locker::lease::{HeldLease, Renewal};

/// Name of the scheduler thread (one per `Locker` and its clones). At most 15 bytes: Linux
/// truncates longer thread names.
pub(crate) const THREAD_NAME: &str = "syncguard-hb";

/// Shortest and longest pause before retrying a renewal that failed.
const MIN_RETRY_GAP: Duration = Duration::from_millis(10);
const MAX_RETRY_GAP: Duration = Duration::from_secs(1);

pub(crate) struct Scheduler {
    queue: Mutex<Queue>,
    wakeup: Condvar,
}

#[derive(Default)]
struct Queue {
    due: BinaryHeap<Reverse<Due>>,
    next_seq: u64,
    /// Heap size at which finished entries are swept out.
    compact_at: usize,
    running: bool,
    shutdown: bool,
}

struct Due {
    at: Instant,
    seq: u64,
    lease: Arc<HeldLease>,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

const MIN_COMPACT_AT: usize = 64;

impl Scheduler {
    pub(crate) fn new() -> Self {
        Scheduler {
            queue: Mutex::new(Queue {
                compact_at: MIN_COMPACT_AT,
                ..Queue::default()
            }),
            wakeup: Condvar::new(),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the scheduler thread unless it runs already. The thread holds `store` weakly and
    /// ends when the locker's shared state is gone.
    pub(crate) fn ensure_running(self: &Arc<Self>, store: Weak<dyn Store>) -> Result<()> {
        let mut queue = self.queue();
        if queue.running {
            return Ok(());
        }
        let scheduler = Arc::clone(self);
        std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || scheduler.run(store))
            .map_err(|e| {
                LockError::internal("could not start the heartbeat thread").with_source(e)
            })?;
        queue.running = true;
        Ok(())
    }

    /// Puts `lease` in the queue to be renewed at `at`.
    pub(crate) fn schedule(&self, lease: Arc<HeldLease>, at: Instant) {
        let mut queue = self.queue();
        if queue.due.len() >= queue.compact_at {
            queue.due.retain(|Reverse(due)| !due.lease.is_finished());
            queue.compact_at = (queue.due.len() * 2).max(MIN_COMPACT_AT);
        }
        let seq = queue.next_seq;
        queue.next_seq += 1;
        let wake = queue.due.peek().is_none_or(|Reverse(first)| at < first.at);
        queue.due.push(Reverse(Due { at, seq, lease }));
        drop(queue);
        if wake {
            self.wakeup.notify_one();
        }
    }

    /// Ends the thread (the locker and all its guards are gone).
    pub(crate) fn shutdown(&self) {
        self.queue().shutdown = true;
        self.wakeup.notify_all();
    }

    fn run(&self, store: Weak<dyn Store>) {
        while let Some(lease) = self.next_due() {
            let Some(store) = store.upgrade() else { break };
            let next = catch_unwind(AssertUnwindSafe(|| renew(store.as_ref(), &lease)));
            match next {
                Ok(Some(at)) => self.schedule(lease, at),
                Ok(None) => {}
                Err(_) => {
                    // Only a bug gets here. Keep the lease in the loop so it is retried, or
                    // declared lost at its deadline, rather than silently left to expire.
                    log::error!("syncguard: heartbeat renewal panicked; retrying");
                    self.schedule(lease, Instant::now() + MAX_RETRY_GAP);
                }
            }
        }
    }

    /// Blocks until a lease is due; `None` on shutdown.
    fn next_due(&self) -> Option<Arc<HeldLease>> {
        let mut queue = self.queue();
        loop {
            if queue.shutdown {
                return None;
            }
            let now = Instant::now();
            let wait = match queue.due.peek() {
                Some(Reverse(first)) if first.at <= now => {
                    return queue.due.pop().map(|Reverse(due)| due.lease);
                }
                Some(Reverse(first)) => Some(first.at - now),
                None => None,
            };
            queue = match wait {
                Some(wait) => {
                    self.wakeup
                        .wait_timeout(queue, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
                None => self
                    .wakeup
                    .wait(queue)
                    .unwrap_or_else(PoisonError::into_inner),
            };
        }
    }
}

/// Renews one due lease; the next time it is due, or `None` when it leaves the heartbeat.
fn renew(store: &dyn Store, lease: &HeldLease) -> Option<Instant> {
    let next_due = lease.next_due();
    // `LockGuard::extend` moved the schedule: come back then.
    if next_due > Instant::now() {
        return (!lease.is_finished()).then_some(next_due);
    }
    match lease.renew(store.driver(), lease.ttl()) {
        Renewal::Renewed => Some(lease.next_due()),
        Renewal::Ended => None,
        Renewal::Failed(error) => {
            log::warn!("syncguard: heartbeat renewal failed, will retry: {error}");
            let gap = lease
                .interval()
                .map_or(MIN_RETRY_GAP, |i| i / 4)
                .clamp(MIN_RETRY_GAP, MAX_RETRY_GAP);
            Some((Instant::now() + gap).min(lease.deadline()))
        }
    }
}
