//! The heartbeat: per `Locker`, one scheduler thread and a few workers renew every lease its
//! guards hold, in batches, and declare a lease lost at its deadline.
//!
//! Leases wait in a min-heap ordered by when something is due: a renewal, or a deadline check.
//! The scheduler thread sleeps until the earliest entry is due, takes every renewal due within
//! a short window, and hands them to the workers in batches ([`Driver::extend_leases`]: one
//! request for many leases where the store can). A slow batch holds up only its own worker, so
//! no lease waits for another lease's renewal beyond [`MAX_WORKERS`] stuck calls; threads stay
//! at most `1 + MAX_WORKERS` whatever the number of guards. Deadline checks run on the
//! scheduler thread itself and never wait for a renewal in flight, so a lease whose renewal
//! hangs is still reported lost at its deadline. The permits of a semaphore renew together:
//! the first that falls due brings the others, found through their index by semaphore
//! ([`DuePermits`]) rather than a walk of the whole queue.
//!
//! [`Driver::extend_leases`]: crate::driver::Driver::extend_leases

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashSet, VecDeque};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

use crate::driver::{LeaseKind, LeaseRef, Ttl};
use crate::error::{LockError, Result};
use crate::key::Key;
use crate::locker::due_permits::DuePermits;
use crate::locker::lease::{Begin, HeldLease, Renewal, Ticket};
use crate::locker::store::Store;

/// Name of the scheduler thread (one per `Locker` and its clones). At most 15 bytes: Linux
/// truncates longer thread names.
pub(crate) const THREAD_NAME: &str = "syncguard-hb";
/// Name of the renewal workers.
pub(crate) const WORKER_NAME: &str = "syncguard-hb-w";

/// Most renewal workers per `Locker`.
pub(crate) const MAX_WORKERS: usize = 4;
/// Most leases in one batch.
const MAX_BATCH: usize = 256;
/// Renewals due this soon are sent with the batch going now: early by at most this much, so
/// that leases acquired a moment apart share a request.
const COALESCE: Duration = Duration::from_millis(10);

/// Shortest and longest pause before retrying a renewal that failed.
const MIN_RETRY_GAP: Duration = Duration::from_millis(10);
const MAX_RETRY_GAP: Duration = Duration::from_secs(1);

pub(crate) struct Scheduler {
    queue: Mutex<Queue>,
    /// Wakes the scheduler thread: an earlier entry, or shutdown.
    wakeup: Condvar,
    /// Wakes a worker: a batch is waiting, or shutdown.
    work: Condvar,
}

#[derive(Default)]
struct Queue {
    due: BinaryHeap<Reverse<Due>>,
    /// The permits among `due`'s current renewals, by semaphore.
    permits: DuePermits,
    next_seq: u64,
    /// Heap size at which finished entries are swept out.
    compact_at: usize,
    batches: VecDeque<Vec<Arc<HeldLease>>>,
    running: bool,
    workers: usize,
    idle_workers: usize,
    shutdown: bool,
}

/// What is due when.
enum Task {
    /// Renew, unless the lease was rescheduled since (its generation moved on).
    Renew { generation: u64 },
    /// Declare the lease lost if its deadline has passed without a renewal.
    Deadline,
}

struct Due {
    at: Instant,
    seq: u64,
    lease: Arc<HeldLease>,
    task: Task,
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
            work: Condvar::new(),
        }
    }

    fn queue(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Starts the scheduler thread unless it runs already. Threads hold `store` weakly and end
    /// when the locker's shared state is gone.
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

    /// Queues the next renewal of `lease` at its due time (when the heartbeat is on) and a
    /// deadline check at its deadline: after it was acquired, or a renewal of it succeeded.
    pub(crate) fn schedule(&self, lease: &Arc<HeldLease>) {
        let mut queue = self.queue();
        let mut earliest = false;
        if lease.interval().is_some() {
            let generation = lease.next_generation();
            earliest |= Self::push(
                &mut queue,
                lease,
                lease.next_due(),
                Task::Renew { generation },
            );
        }
        earliest |= Self::push(&mut queue, lease, lease.deadline(), Task::Deadline);
        drop(queue);
        if earliest {
            self.wakeup.notify_one();
        }
    }

    /// After a renewal of `lease` failed: another try soon, never later than the deadline.
    fn retry(&self, lease: &Arc<HeldLease>) {
        let gap = lease
            .interval()
            .map_or(MIN_RETRY_GAP, |interval| interval / 4)
            .clamp(MIN_RETRY_GAP, MAX_RETRY_GAP);
        let at = (Instant::now() + gap).min(lease.deadline());
        let generation = lease.next_generation();
        if Self::push(&mut self.queue(), lease, at, Task::Renew { generation }) {
            self.wakeup.notify_one();
        }
    }

    /// Queues `task` for `lease` at `at`; `true` when it is now the earliest entry, so that the
    /// scheduler thread must wake to sleep for less.
    fn push(queue: &mut Queue, lease: &Arc<HeldLease>, at: Instant, task: Task) -> bool {
        if queue.due.len() >= queue.compact_at {
            Self::sweep(queue);
        }
        let seq = queue.next_seq;
        queue.next_seq += 1;
        let earliest = queue.due.peek().is_none_or(|Reverse(first)| at < first.at);
        if let Task::Renew { generation } = task
            && lease.kind() == LeaseKind::Permit
        {
            queue.permits.queued(lease, generation);
        }
        queue.due.push(Reverse(Due {
            at,
            seq,
            lease: Arc::clone(lease),
            task,
        }));
        earliest
    }

    /// Drops the entries of finished leases.
    fn sweep(queue: &mut Queue) {
        queue.due.retain(|Reverse(due)| !due.lease.is_finished());
        queue.permits.sweep();
        queue.compact_at = (queue.due.len() * 2).max(MIN_COMPACT_AT);
    }

    /// Ends the threads (the locker and all its guards are gone).
    pub(crate) fn shutdown(&self) {
        self.queue().shutdown = true;
        self.wakeup.notify_all();
        self.work.notify_all();
    }

    /// The scheduler thread: deadlines here, renewals to the workers.
    fn run(self: Arc<Self>, store: Weak<dyn Store>) {
        loop {
            let Some(batch) = self.next_batch(&store) else {
                return;
            };
            if !batch.is_empty() {
                self.dispatch(batch, &store);
            }
        }
    }

    /// Blocks until something is due; runs the due deadline checks and returns the due
    /// renewals (possibly none). `None` on shutdown.
    fn next_batch(&self, store: &Weak<dyn Store>) -> Option<Vec<Arc<HeldLease>>> {
        let mut queue = self.queue();
        loop {
            if queue.shutdown {
                return None;
            }
            let now = Instant::now();
            match queue.due.peek() {
                Some(Reverse(first)) if first.at <= now => break,
                Some(Reverse(first)) => {
                    let wait = first.at - now;
                    queue = self
                        .wakeup
                        .wait_timeout(queue, wait)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0;
                }
                None => {
                    queue = self
                        .wakeup
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            }
        }
        let (renewals, deadlines) = Self::take_due(&mut queue);
        drop(queue);
        let store = if deadlines.is_empty() {
            None
        } else {
            store.upgrade()
        };
        for lease in deadlines {
            // Runs callbacks: guard against their panics here too.
            if catch_unwind(AssertUnwindSafe(|| lease.expire_if_overdue())).is_err() {
                log::error!("syncguard: a lease deadline check panicked");
            }
            if let Some(store) = &store {
                lease.release_if_lapsed(store.as_ref());
            }
        }
        Some(renewals)
    }

    /// Takes the due entries out of the queue: the renewals due within [`COALESCE`] (with the
    /// other permits of their semaphores), and the leases whose deadline checks are due.
    fn take_due(queue: &mut Queue) -> (Vec<Arc<HeldLease>>, Vec<Arc<HeldLease>>) {
        let horizon = Instant::now() + COALESCE;
        let mut renewals = Vec::new();
        let mut deadlines = Vec::new();
        while let Some(Reverse(first)) = queue.due.peek() {
            let is_renewal = matches!(first.task, Task::Renew { .. });
            let due = if is_renewal { horizon } else { Instant::now() };
            if first.at > due {
                break;
            }
            let Some(Reverse(entry)) = queue.due.pop() else {
                break;
            };
            match entry.task {
                Task::Renew { generation } => {
                    if entry.lease.kind() == LeaseKind::Permit {
                        queue.permits.dequeued(&entry.lease, generation);
                    }
                    if entry.lease.generation() == generation && !entry.lease.is_finished() {
                        renewals.push(entry.lease);
                    }
                }
                Task::Deadline => deadlines.push(entry.lease),
            }
        }
        Self::add_their_semaphores(queue, &mut renewals);
        (renewals, deadlines)
    }

    /// Adds to `renewals` the other permits of their semaphores, whatever their due times:
    /// renewed early with the first that falls due, they fall due together from then on. A
    /// store may keep a semaphore's permits in one record (Firestore: one document), where
    /// every renewal sent on its own is a write of that record; renewed together they are one.
    fn add_their_semaphores(queue: &mut Queue, renewals: &mut Vec<Arc<HeldLease>>) {
        let semaphores: HashSet<Key> = renewals
            .iter()
            .filter(|lease| lease.kind() == LeaseKind::Permit)
            .map(|lease| lease.key().clone())
            .collect();
        for semaphore in &semaphores {
            queue.permits.take_semaphore(semaphore, renewals);
        }
    }

    /// Queues `leases` for the workers in batches, starting a worker if none is idle.
    fn dispatch(self: &Arc<Self>, leases: Vec<Arc<HeldLease>>, store: &Weak<dyn Store>) {
        let mut queue = self.queue();
        // Renewals that find every worker busy (a slow store) join the batch still waiting
        // for one: else each window's few renewals would queue as a batch of their own, and
        // with every call slow the queue would grow faster than workers take from it.
        let mut leases = leases.into_iter();
        if let Some(waiting) = queue.batches.back_mut() {
            let room = MAX_BATCH.saturating_sub(waiting.len());
            waiting.extend(leases.by_ref().take(room));
        }
        let leases: Vec<Arc<HeldLease>> = leases.collect();
        for batch in leases.chunks(MAX_BATCH) {
            queue.batches.push_back(batch.to_vec());
        }
        let wanted = queue.batches.len().min(MAX_WORKERS);
        while queue.idle_workers < wanted && queue.workers < MAX_WORKERS {
            let scheduler = Arc::clone(self);
            let store = store.clone();
            let started = std::thread::Builder::new()
                .name(WORKER_NAME.to_owned())
                .spawn(move || scheduler.work(store));
            match started {
                Ok(_) => {
                    queue.workers += 1;
                    queue.idle_workers += 1;
                }
                Err(error) if queue.workers == 0 => {
                    // Without a worker nothing is renewed: leases run out and are reported
                    // lost at their deadlines, which the scheduler thread still checks.
                    log::error!("syncguard: could not start a heartbeat worker: {error}");
                    queue.batches.clear();
                    break;
                }
                Err(_) => break,
            }
        }
        drop(queue);
        self.work.notify_all();
    }

    /// A worker: renews batch after batch.
    fn work(self: Arc<Self>, store: Weak<dyn Store>) {
        loop {
            let batch = {
                let mut queue = self.queue();
                loop {
                    if queue.shutdown {
                        queue.workers -= 1;
                        queue.idle_workers -= 1;
                        return;
                    }
                    if let Some(batch) = queue.batches.pop_front() {
                        queue.idle_workers -= 1;
                        break batch;
                    }
                    queue = self
                        .work
                        .wait(queue)
                        .unwrap_or_else(PoisonError::into_inner);
                }
            };
            let Some(store) = store.upgrade() else {
                let mut queue = self.queue();
                queue.workers -= 1;
                return;
            };
            if catch_unwind(AssertUnwindSafe(|| self.renew(store.as_ref(), &batch))).is_err() {
                // Only a bug gets here. Keep the leases in the loop so they are retried, or
                // declared lost at their deadlines, rather than silently left to expire.
                log::error!("syncguard: heartbeat renewal panicked; retrying");
                for lease in &batch {
                    self.retry(lease);
                }
            }
            drop(store);
            self.queue().idle_workers += 1;
        }
    }

    /// Renews one batch through the driver's batch renewal.
    fn renew(&self, store: &dyn Store, batch: &[Arc<HeldLease>]) {
        let mut sending: Vec<(&Arc<HeldLease>, Ticket)> = Vec::with_capacity(batch.len());
        for lease in batch {
            match lease.begin_renewal(None, false) {
                Begin::Send(ticket) => sending.push((lease, ticket)),
                // A guard's own extension is in flight: it reschedules when done; look again
                // shortly in case it fails.
                Begin::Busy => self.retry(lease),
                Begin::Done(_) => lease.release_if_lapsed(store),
            }
        }
        if sending.is_empty() {
            return;
        }
        let requests: Vec<(LeaseRef<'_>, Ttl)> = sending
            .iter()
            .map(|(lease, ticket)| (lease.lease_ref(ticket), ticket.ttl()))
            .collect();
        let answers = store.driver().extend_leases(&requests);
        drop(requests);
        let mut answers = answers.into_iter();
        for (lease, ticket) in sending {
            let answer = answers.next().unwrap_or_else(|| {
                Err(LockError::internal(
                    "the backend answered fewer renewals than it was sent",
                ))
            });
            match lease.finish_renewal(ticket, answer) {
                Renewal::Renewed => self.schedule(lease),
                Renewal::Ended => lease.release_if_lapsed(store),
                Renewal::Failed(error) => {
                    log::warn!(
                        "syncguard: renewing the lease on key {} failed, will retry: {error}",
                        lease.key()
                    );
                    self.retry(lease);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::Lease;
    use crate::fence::Fence;
    use crate::lock_id::LockId;
    use crate::locker::due_permits::address_of;
    use crate::locker::lease::{Grant, Terms};
    use crate::locker::options::Heartbeat;
    use crate::observe::Observers;

    const TTL_MS: i64 = 30_000;

    /// A lease held on `key` with the heartbeat on, acquired `ago`: with `ago` past its TTL,
    /// its deadline has passed.
    fn held(key: &str, kind: LeaseKind, ago: Duration) -> Arc<HeldLease> {
        let lock_id = LockId::generate();
        let ttl = Ttl::from_checked_millis(TTL_MS);
        let sent = Instant::now().checked_sub(ago).unwrap_or_else(Instant::now);
        let grant = Grant {
            key: Key::new(key).unwrap(),
            lock_id: lock_id.clone(),
            kind,
            lease: Lease {
                lock_id: lock_id.as_str().to_owned(),
                fence: Fence::from_counter(1).unwrap(),
                expires_at_ms: i64::MAX / 2,
            },
            version: None,
            sent,
            ttl,
            length: ttl,
        };
        let terms = Terms {
            heartbeat: Heartbeat::Auto,
            max_hold: None,
            min_hold: None,
            on_lock_lost: None,
            observers: Observers::new("memory"),
        };
        Arc::new(HeldLease::new(grant, terms))
    }

    fn permit(semaphore: &str) -> Arc<HeldLease> {
        held(semaphore, LeaseKind::Permit, Duration::ZERO)
    }

    /// Queues a renewal of `lease` due now, as a retry does.
    fn due_now(scheduler: &Scheduler, lease: &Arc<HeldLease>) {
        let generation = lease.next_generation();
        Scheduler::push(
            &mut scheduler.queue(),
            lease,
            Instant::now(),
            Task::Renew { generation },
        );
    }

    /// The index holds exactly the permits whose queued renewal is current.
    fn assert_in_step(queue: &Queue) {
        let mut current: Vec<(usize, u64)> = queue
            .due
            .iter()
            .filter_map(|Reverse(due)| match due.task {
                Task::Renew { generation }
                    if due.lease.kind() == LeaseKind::Permit
                        && due.lease.generation() == generation
                        && !due.lease.is_finished() =>
                {
                    Some((address_of(&due.lease), generation))
                }
                _ => None,
            })
            .collect();
        current.sort_unstable();
        assert_eq!(queue.permits.entries(), current);
    }

    fn addresses(leases: &[Arc<HeldLease>]) -> Vec<usize> {
        let mut addresses: Vec<usize> = leases.iter().map(|lease| address_of(lease)).collect();
        addresses.sort_unstable();
        addresses
    }

    #[test]
    fn scheduled_permits_are_indexed_by_semaphore_and_locks_are_not() {
        let scheduler = Scheduler::new();
        let leases = [
            permit("s1"),
            permit("s1"),
            permit("s2"),
            held("a-lock", LeaseKind::Lock, Duration::ZERO),
        ];
        for lease in &leases {
            scheduler.schedule(lease);
        }
        let queue = scheduler.queue();
        assert_eq!(queue.permits.entries().len(), 3);
        assert_eq!(queue.permits.semaphores(), 2);
        assert_in_step(&queue);
    }

    #[test]
    fn a_due_permit_brings_the_other_permits_of_its_semaphore_only() {
        let scheduler = Scheduler::new();
        let first = permit("s1");
        let siblings = [permit("s1"), permit("s1")];
        let other = permit("s2");
        for lease in siblings.iter().chain([&first, &other]) {
            scheduler.schedule(lease);
        }
        due_now(&scheduler, &first);

        let mut queue = scheduler.queue();
        let (renewals, deadlines) = Scheduler::take_due(&mut queue);
        assert!(deadlines.is_empty());
        let expected = [
            Arc::clone(&first),
            Arc::clone(&siblings[0]),
            Arc::clone(&siblings[1]),
        ];
        assert_eq!(addresses(&renewals), addresses(&expected));
        // The siblings' queued renewals are stale now: only the other semaphore's is left.
        assert_eq!(
            queue.permits.entries(),
            addresses(&[other])
                .into_iter()
                .map(|at| (at, 1))
                .collect::<Vec<_>>()
        );
        assert_in_step(&queue);
    }

    #[test]
    fn a_renewed_permit_is_indexed_once_at_its_new_renewal() {
        let scheduler = Scheduler::new();
        let lease = permit("s1");
        scheduler.schedule(&lease);
        // As after a renewal: the next one replaces the one queued.
        scheduler.schedule(&lease);
        let queue = scheduler.queue();
        assert_eq!(
            queue.permits.entries(),
            vec![(address_of(&lease), lease.generation())]
        );
        assert_in_step(&queue);
    }

    #[test]
    fn a_stale_renewal_leaving_the_queue_keeps_the_current_one() {
        let scheduler = Scheduler::new();
        let lease = permit("s1");
        due_now(&scheduler, &lease);
        // Rescheduled before the one due now was taken: that one is stale.
        scheduler.schedule(&lease);
        let mut queue = scheduler.queue();
        let (renewals, _) = Scheduler::take_due(&mut queue);
        assert!(renewals.is_empty());
        assert_eq!(
            queue.permits.entries(),
            vec![(address_of(&lease), lease.generation())]
        );
        assert_in_step(&queue);
    }

    #[test]
    fn a_permit_in_flight_is_not_brought_again() {
        let scheduler = Scheduler::new();
        let first = permit("s1");
        let second = permit("s1");
        due_now(&scheduler, &first);
        due_now(&scheduler, &second);
        let mut queue = scheduler.queue();
        let (renewals, _) = Scheduler::take_due(&mut queue);
        assert_eq!(addresses(&renewals), addresses(&[first, second]));
        assert!(queue.permits.entries().is_empty());
        assert_eq!(queue.permits.semaphores(), 0);
        assert_in_step(&queue);
    }

    #[test]
    fn finished_permits_are_not_brought_and_leave_with_the_sweep() {
        let scheduler = Scheduler::new();
        let overdue = Duration::from_secs(60);
        let lost_sibling = held("s1", LeaseKind::Permit, overdue);
        let lost_alone = held("s2", LeaseKind::Permit, overdue);
        let kept = permit("s1");
        let first = permit("s1");
        for lease in [&lost_sibling, &lost_alone, &kept, &first] {
            scheduler.schedule(lease);
        }
        let later = Instant::now() + Duration::from_secs(3600);
        for lost in [&lost_sibling, &lost_alone] {
            lost.expire_if_overdue();
            assert!(lost.is_finished());
            // A renewal still queued for it, as for a guard released before its turn.
            let generation = lost.next_generation();
            Scheduler::push(
                &mut scheduler.queue(),
                lost,
                later,
                Task::Renew { generation },
            );
        }
        due_now(&scheduler, &first);

        let mut queue = scheduler.queue();
        assert_in_step(&queue);
        let (renewals, deadlines) = Scheduler::take_due(&mut queue);
        assert_eq!(addresses(&renewals), addresses(&[first, kept]));
        assert_eq!(
            addresses(&deadlines),
            addresses(&[lost_sibling, Arc::clone(&lost_alone)])
        );
        // The other semaphore was not taken: its finished permit waits for the sweep.
        assert_eq!(queue.permits.semaphores(), 1);
        Scheduler::sweep(&mut queue);
        assert_eq!(queue.permits.semaphores(), 0);
        assert_in_step(&queue);
    }
}
