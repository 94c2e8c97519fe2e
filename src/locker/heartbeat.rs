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
use crate::locker::guard::{HeldLease, LeaseOps, Phase};

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

    /// Starts the scheduler thread unless it runs already. The thread holds `ops` weakly and
    /// ends when the locker's shared state is gone.
    pub(crate) fn ensure_running(self: &Arc<Self>, ops: Weak<dyn LeaseOps>) -> Result<()> {
        let mut queue = self.queue();
        if queue.running {
            return Ok(());
        }
        let scheduler = Arc::clone(self);
        std::thread::Builder::new()
            .name(THREAD_NAME.to_owned())
            .spawn(move || scheduler.run(ops))
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

    fn run(&self, ops: Weak<dyn LeaseOps>) {
        while let Some(lease) = self.next_due() {
            let Some(ops) = ops.upgrade() else { break };
            let next = catch_unwind(AssertUnwindSafe(|| renew(ops.as_ref(), &lease)));
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
fn renew(ops: &dyn LeaseOps, lease: &HeldLease) -> Option<Instant> {
    let now = Instant::now();
    let next_due = lease.next_due();
    // `LockGuard::extend` moved the schedule: come back then.
    if next_due > now {
        return (!lease.is_finished()).then_some(next_due);
    }
    let mut phase = lease.phase();
    if *phase != Phase::Held {
        return None;
    }
    if lease.lost_if_overdue(&mut phase) {
        drop(phase);
        lease.report_lost("the lease ran out: renewals kept failing until its TTL passed");
        return None;
    }
    let ttl = lease.ttl();
    let sent = Instant::now();
    // The phase lock stays held across the call: a release waits for it and, once it has
    // set `Releasing`, no renewal of this lease can go out any more.
    match ops.extend(lease.lock_id(), ttl) {
        Ok(Some(expires_at_ms)) => {
            lease.renewed(&mut phase, sent, ttl, expires_at_ms);
            if *phase == Phase::Held {
                Some(lease.next_due())
            } else {
                drop(phase);
                lease.report_lost("the renewal came back after the lease had run out");
                None
            }
        }
        Ok(None) => {
            lease.mark_lost(&mut phase, true);
            drop(phase);
            lease.report_lost("the lock was gone when the heartbeat renewed it");
            None
        }
        Err(error) => {
            drop(phase);
            log::warn!("syncguard: heartbeat renewal failed, will retry: {error}");
            let gap = lease
                .interval()
                .map_or(MIN_RETRY_GAP, |i| i / 4)
                .clamp(MIN_RETRY_GAP, MAX_RETRY_GAP);
            Some((Instant::now() + gap).min(lease.deadline()))
        }
    }
}
