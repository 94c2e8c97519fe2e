//! The line contracts: waiters are served in the order they arrived at the store, a dead
//! waiter is skipped once its place lapses, one that gives up leaves at once, a single attempt
//! does not pass a live line, and [`LockOptions::wait_in_line`]`(false)` barges
//! ([`Line`]). Each takes the backend by value; several [`Locker`]s share
//! it through an `Arc`, as several processes share a store.
//!
//! A dead waiter is played by a place taken straight through the driver and never renewed:
//! what a waiter leaves behind when its process is killed. Assertions that need the dead place
//! to be still live check that it still is *after* looking, through the store's own clock
//! ([`LockBackend::waiters`] answers live places only), so a slow machine cannot fail them.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::driver::{
    Acquisition, Acquisitions, Driver, DriverExt as _, Key, LeaseKind, Line, LockId, Mode,
    OnRelease, Permits, ReleaseWatch, Request, TIME_TOLERANCE_MS, Ttl,
};
use crate::{Backoff, CancelToken, ErrorCode, Fence, Lease, LockBackend, LockOptions, Locker};

use super::recorder::{Call, recorded_locker};
use super::support::{
    CLOCK_SLACK_MS, CONTENTION_DEADLINE, LONG_TTL, PATIENCE, acquired, places, unique_key,
    wait_until,
};

/// Waiters that start in turn — each once the one before has its place — on a held lock are
/// granted in that order (by their fences), and the line shows them in that order meanwhile.
pub fn waiters_are_served_in_arrival_order<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-order");
    let locker = Locker::new(Arc::new(backend));
    let held = locker.lock(&key).unwrap();
    let granted = served_in_turn(&locker, &key, 4, None);
    drop(held);
    assert_eq!(in_fence_order(granted.join()), [0, 1, 2, 3]);
    assert!(places(locker.backend(), &key, LeaseKind::Lock).is_empty());
}

/// A semaphore's waiters get free permits in their order: with two permits held and three
/// waiters in line, each permit given back goes to the first waiter.
pub fn semaphores_serve_their_line_in_order<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-permits");
    let locker = Locker::new(Arc::new(backend));
    let semaphore = locker.semaphore(&key, 2).unwrap();
    let [first, second] = [semaphore.acquire().unwrap(), semaphore.acquire().unwrap()];
    let granted = served_in_turn(&locker, &key, 3, Some(2));
    assert!(
        places(locker.backend(), &key, LeaseKind::Lock).is_empty(),
        "the semaphore's line is its own, not the lock's"
    );
    // One permit goes round: each waiter takes it in turn (with two free at once, the first
    // two places could both take one, in either order).
    drop(first);
    assert_eq!(in_fence_order(granted.join()), [0, 1, 2]);
    drop(second);
    assert!(places(locker.backend(), &key, LeaseKind::Permit).is_empty());
}

/// A waiter that dies in line (its place taken, never renewed) holds up the waiters behind it
/// only until its place lapses: the next waiter is not granted while the dead place is live,
/// and is granted after.
pub fn a_dead_waiter_is_skipped_when_its_place_lapses<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-dead");
    let locker = Locker::new(Arc::new(backend));
    let held = locker.lock(&key).unwrap();
    let dead = dead_place(locker.backend(), &key);
    let waiter = served_in_turn(&locker, &key, 1, None);
    drop(held);
    // Whether the waiter was granted is looked at first, the dead place second: a place that
    // has lapsed never comes back, so if it is live after the waiter was seen granted, it was
    // live at the grant.
    let mut granted_past_it = false;
    wait_until(
        "the waiter behind a dead place to be granted",
        CONTENTION_DEADLINE,
        || {
            let finished = waiter.finished();
            granted_past_it |= finished && still_in_line(locker.backend(), &key, &dead);
            finished
        },
    );
    assert!(
        !granted_past_it,
        "the waiter was granted while the dead place was live"
    );
    assert_eq!(waiter.join().len(), 1);
    assert!(places(locker.backend(), &key, LeaseKind::Lock).is_empty());
}

/// A dead waiter holds the line up for about 6 s at most:
/// [`PLACE_TTL`](crate::driver::PLACE_TTL) (5 s, as documented) after its last attempt plus the
/// tolerance every lease is judged with. Both halves are read off the store's own clock (a
/// lease's expiry less its TTL), never measured with the client's: the place read back expires
/// at most 5 s after the attempt, and whenever the place is still in the line, the store's time
/// just before that look is within 5 s and the tolerance of the attempt. So places that lived
/// longer fail it, and a slow machine cannot (it only looks later).
pub fn a_dead_waiter_holds_the_line_up_for_place_ttl_at_most<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-dead-bound");
    let holder = acquired(&backend, &key, LONG_TTL);
    let clock = StoreClock::start(&backend);
    let dead = dead_place(&backend, &key);
    let attempted_ms = clock.now_ms(&backend);
    let checked = Key::new(&key).unwrap();
    let place = backend
        .find_line(&checked, LeaseKind::Lock)
        .unwrap()
        .into_iter()
        .find(|place| place.place_id == dead.as_str())
        .expect("the dead waiter's place is in the line");
    // The documented figure, not the constant: a longer PLACE_TTL must fail this.
    let place_ttl_ms = DOCUMENTED_PLACE_TTL_MS;
    assert!(
        place.expires_at_ms <= attempted_ms + place_ttl_ms + CLOCK_SLACK_MS,
        "the place expires {} ms after its waiter's last attempt, beyond PLACE_TTL ({place_ttl_ms} \
         ms)",
        place.expires_at_ms - attempted_ms
    );
    let bound_ms = place_ttl_ms + TIME_TOLERANCE_MS + CLOCK_SLACK_MS;
    wait_until(
        "the dead waiter's place to lapse",
        CONTENTION_DEADLINE,
        || {
            let before_ms = clock.now_ms(&backend);
            let live = still_in_line(&backend, &key, &dead);
            assert!(
                !live || before_ms - attempted_ms <= bound_ms,
                "the dead waiter's place is still in the line {} ms after its last attempt \
                 (bound: PLACE_TTL and the tolerance, {bound_ms} ms)",
                before_ms - attempted_ms
            );
            !live
        },
    );
    clock.stop(&backend);
    let _ = backend.release(&holder.lock_id);
}

/// A waiter that gives up — cancelled, or out of time — leaves the line before its call
/// returns.
pub fn a_waiter_that_gives_up_leaves_at_once<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-leave");
    let locker = Locker::new(Arc::new(backend));
    let _held = locker.lock(&key).unwrap();
    let cancel = CancelToken::new();
    let waiter = thread::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        let options = LockOptions::default().cancel(cancel.clone());
        move || locker.lock_with(&key, &options).map(drop)
    });
    wait_until("the waiter to take its place", PATIENCE, || {
        places(locker.backend(), &key, LeaseKind::Lock).len() == 1
    });
    cancel.cancel();
    let error = waiter.join().unwrap().unwrap_err();
    assert_eq!(error.code(), ErrorCode::Aborted);
    assert!(
        places(locker.backend(), &key, LeaseKind::Lock).is_empty(),
        "a cancelled waiter left its place behind"
    );
    // Its first attempt took a place (the key is held): timing out must give it back.
    let timed_out = locker.try_lock_for(&key, std::time::Duration::from_millis(300));
    assert!(timed_out.unwrap().is_none());
    assert!(
        places(locker.backend(), &key, LeaseKind::Lock).is_empty(),
        "a waiter out of time left its place behind"
    );
}

/// A single attempt — [`Locker::try_lock`], [`LockBackend::acquire`], a semaphore's
/// `try_acquire` — takes no place and is refused while a live place waits, though the key is
/// free.
pub fn a_single_attempt_does_not_pass_a_live_line<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-single");
    let locker = Locker::new(Arc::new(backend));
    let dead = dead_place(locker.backend(), &key);
    let guard = locker.try_lock(&key).unwrap();
    let acquired = locker.backend().acquire(&key, LONG_TTL).unwrap();
    if still_in_line(locker.backend(), &key, &dead) {
        assert!(guard.is_none(), "try_lock passed a live line");
        assert!(acquired.lease().is_none(), "acquire passed a live line");
    }
    assert_eq!(
        places_other_than(locker.backend(), &key, &dead),
        0,
        "a single attempt took a place"
    );

    // One permit, one waiter: the free permit is the waiter's.
    let semaphore = locker.semaphore(&key, 1).unwrap();
    let dead = dead_permit_place(locker.backend(), &key, 1);
    let permit = semaphore.try_acquire().unwrap();
    if still_in_permit_line(locker.backend(), &key, &dead) {
        assert!(
            permit.is_none(),
            "a permit's try_acquire passed a live line"
        );
    }
}

/// With [`LockOptions::wait_in_line`]`(false)` an acquisition barges: it takes a free key
/// though a place waits, and takes no place while it waits itself.
pub fn without_the_line_an_acquisition_barges<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-off");
    let barging = LockOptions::default()
        .wait_in_line(false)
        .timeout(CONTENTION_DEADLINE);
    let (locker, recorder) = recorded_locker(backend, barging);
    let held = locker.lock(&key).unwrap();
    let dead = dead_place(locker.backend(), &key);
    let waiter = thread::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        move || locker.lock(&key).map(drop)
    });
    wait_until("the barging waiter to try twice", PATIENCE, || {
        recorder.count(&Call::Acquire(key.clone())) >= 3
    });
    assert_eq!(
        places_other_than(locker.backend(), &key, &dead),
        0,
        "a barging waiter took a place"
    );
    drop(held);
    waiter.join().unwrap().unwrap();
    // Barging past a live place, in one attempt:
    let barged = locker.try_lock(&key).unwrap();
    if still_in_line(locker.backend(), &key, &dead) {
        assert!(barged.is_some(), "try_lock without the line heeded it");
    }
}

/// One waiter's attempts are one place, however often they are sent (a request the pool
/// repeats): the place keeps its ticket and is renewed.
pub fn a_repeated_place_is_one_place<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-repeat");
    let held = backend.acquire(&key, LONG_TTL).unwrap().lease();
    assert!(held.is_some());
    let checked = Key::new(&key).unwrap();
    let place = LockId::generate();
    let ttl = Ttl::new(LONG_TTL).unwrap();
    for _ in 0..3 {
        let answer = backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)));
        assert_eq!(answer.unwrap(), Acquisition::Locked);
    }
    let line = backend.find_line(&checked, LeaseKind::Lock).unwrap();
    assert_eq!(line.len(), 1, "one waiter, one place: {line:?}");
    assert_eq!(line[0].place_id, place.as_str());
    backend
        .leave_line(&checked, LeaseKind::Lock, &place)
        .unwrap();
    assert!(backend.waiters(&key, LeaseKind::Lock).unwrap().is_empty());
}

/// Where releases are not announced (behind PgBouncer, on Firestore, while a store's release
/// channel is down), the first in line polls often and the waiters well back only renew their
/// places, even when their options ask for quick retries: a key's line costs the store about
/// one fast poller, however many wait. Eight waiters, each on a `Locker` of its own (as
/// processes are) that hears no releases, counted per waiter: while the first makes 40
/// attempts, the last makes fewer than two thirds as many (about a tenth on a quick store).
pub fn only_the_first_in_line_polls_often<B: LockBackend + 'static>(backend: B) {
    const WAITERS: usize = 8;
    let backend = Arc::new(backend);
    let key = unique_key("line-pace");
    let holder = Locker::new(Arc::clone(&backend));
    let held = holder.lock(&key).unwrap();
    let cancel = CancelToken::new();
    let options = LockOptions::default()
        .retry_delay(Duration::from_millis(10))
        .backoff(Backoff::Fixed)
        .timeout(CONTENTION_DEADLINE)
        .cancel(cancel.clone());
    let mut waiters = Vec::new();
    for n in 0..WAITERS {
        let counted = Arc::new(Counted {
            inner: Arc::clone(&backend),
            attempts: AtomicUsize::new(0),
        });
        let locker = Locker::new(Arc::clone(&counted));
        let (waited, options) = (key.clone(), options.clone());
        let thread = thread::spawn(move || locker.lock_with(&waited, &options).map(drop));
        wait_until(&format!("waiter {n} to take its place"), PATIENCE, || {
            places(&*backend, &key, LeaseKind::Lock).len() > n
        });
        waiters.push((counted, thread));
    }
    let (first, last) = (&waiters[0].0, &waiters[WAITERS - 1].0);
    let (first_from, last_from) = (first.attempts(), last.attempts());
    wait_until(
        "the first in line to make 40 attempts",
        CONTENTION_DEADLINE,
        || first.attempts() >= first_from + 40,
    );
    let last_made = last.attempts() - last_from;
    let first_made = first.attempts() - first_from;
    assert!(
        last_made * 3 < first_made * 2,
        "the last of {WAITERS} waiters made {last_made} attempts while the first made {first_made}"
    );
    cancel.cancel();
    for (_, thread) in waiters {
        let error = thread.join().unwrap().unwrap_err();
        assert_eq!(error.code(), ErrorCode::Aborted);
    }
    drop(held);
}

/// A holder that dies (its lease neither renewed nor released, which no store announces) is
/// followed by the first in line once its lease runs out.
pub fn the_first_in_line_notices_an_expiry<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("line-expiry");
    let locker = Locker::new(Arc::new(backend));
    let dead = acquired(locker.backend(), &key, Duration::from_millis(1_500));
    let options = LockOptions::default().timeout(CONTENTION_DEADLINE);
    let guard = locker.lock_with(&key, &options).unwrap();
    assert!(guard.fence() > &dead.fence, "granted after the dead holder");
}

/// A driver that counts the acquisition attempts sent through it and hears no releases: a
/// waiter's `Locker` behind a store that announces none.
struct Counted<B> {
    inner: Arc<B>,
    attempts: AtomicUsize,
}

impl<B> Counted<B> {
    fn attempts(&self) -> usize {
        self.attempts.load(Ordering::SeqCst)
    }
}

impl<B: LockBackend> Driver for Counted<B> {
    fn try_acquire(&self, request: &Request<'_>) -> crate::Result<Acquisitions> {
        self.attempts.fetch_add(1, Ordering::SeqCst);
        self.inner.try_acquire(request)
    }

    fn watch_releases(&self, _: OnRelease) -> crate::Result<Option<Box<dyn ReleaseWatch>>> {
        Ok(None)
    }

    crate::delegate_driver!(self, &*self.inner; describe, release_lease, extend_leases,
        key_is_locked, find, list_records, find_line, leave_line, break_leases);
}

/// Waiters started in turn on `key` (a lock, or a semaphore of `permits`): each thread's
/// holder text is `waiter-N`, and it starts once the line shows the one before. The line
/// shows them in that order.
fn served_in_turn<B: LockBackend + 'static>(
    locker: &Locker<B>,
    key: &str,
    waiters: usize,
    permits: Option<u32>,
) -> Granted {
    let granted = Arc::new(Mutex::new(Vec::new()));
    let line = |locker: &Locker<B>| match permits {
        None => places(locker.backend(), key, LeaseKind::Lock),
        Some(_) => places(locker.backend(), key, LeaseKind::Permit),
    };
    let ahead = line(locker).len();
    let mut threads = Vec::new();
    for n in 0..waiters {
        let options = LockOptions::default()
            .holder(format!("waiter-{n}"))
            .timeout(CONTENTION_DEADLINE);
        let (waiter, key, granted) = (locker.clone(), key.to_owned(), Arc::clone(&granted));
        threads.push(thread::spawn(move || {
            let guard = match permits {
                None => waiter.lock_with(&key, &options),
                Some(permits) => waiter
                    .semaphore(&key, permits)
                    .and_then(|semaphore| semaphore.acquire_with(&options)),
            };
            let guard = guard.expect("granted within the deadline");
            granted.lock().unwrap().push((guard.fence().to_owned(), n));
        }));
        wait_until(&format!("waiter {n} to take its place"), PATIENCE, || {
            line(locker).len() > ahead + n
        });
    }
    let holders: Vec<Option<String>> = line(locker)
        .into_iter()
        .skip(ahead)
        .map(|p| p.holder)
        .collect();
    let expected: Vec<Option<String>> = (0..waiters).map(|n| Some(format!("waiter-{n}"))).collect();
    assert_eq!(holders, expected, "the line in arrival order");
    Granted { threads, granted }
}

/// The waiters of [`served_in_turn`], and the (fence, waiter) of each grant.
struct Granted {
    threads: Vec<thread::JoinHandle<()>>,
    granted: Arc<Mutex<Vec<(Fence, usize)>>>,
}

impl Granted {
    fn finished(&self) -> bool {
        self.threads.iter().all(thread::JoinHandle::is_finished)
    }

    fn join(self) -> Vec<(Fence, usize)> {
        for thread in self.threads {
            thread.join().expect("a waiter panicked");
        }
        std::mem::take(&mut *self.granted.lock().unwrap())
    }
}

/// The waiters, in the order their grants' fences say they were served.
fn in_fence_order(mut granted: Vec<(Fence, usize)>) -> Vec<usize> {
    granted.sort();
    granted.into_iter().map(|(_, n)| n).collect()
}

/// A place in the lock's line of `key` taken and never renewed: a waiter killed in line.
fn dead_place<B: LockBackend + ?Sized>(backend: &B, key: &str) -> LockId {
    let checked = Key::new(key).unwrap();
    let place = LockId::generate();
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let mut answer = backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)));
    if let Ok(Acquisition::Acquired { lease, .. }) = &answer {
        // The key was free: take it, then ask again as a waiter behind ourselves.
        let held = lease.lock_id.clone();
        answer = backend.acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&place)));
        assert!(backend.release(&held).unwrap());
    }
    assert_eq!(answer.unwrap(), Acquisition::Locked);
    assert!(still_in_line(backend, key, &place), "the place was taken");
    place
}

/// [`dead_place`] in the line of the semaphore of `permits` on `key`.
fn dead_permit_place<B: LockBackend + ?Sized>(backend: &B, key: &str, permits: u32) -> LockId {
    let checked = Key::new(key).unwrap();
    let permits_n = Permits::new(permits).unwrap();
    let place = LockId::generate();
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let mut held = Vec::new();
    let answer = loop {
        match backend.acquire_one(
            &Request::one(&checked, ttl)
                .mode(Mode::Permit(permits_n))
                .line(Line::Wait(&place)),
        ) {
            Ok(Acquisition::Acquired { lease, .. }) => held.push(lease.lock_id),
            other => break other,
        }
    };
    for lock_id in held {
        assert!(
            backend
                .release_as(key, LeaseKind::Permit, &lock_id)
                .unwrap()
        );
    }
    assert_eq!(answer.unwrap(), Acquisition::Locked);
    place
}

/// How long a place lives, as the docs promise it (guide.md, cli.md, reliability.md: "about
/// 6 s" with the tolerance).
const DOCUMENTED_PLACE_TTL_MS: i64 = 5_000;

/// The store's time authority, read as the expiry of a lease of its own minus its TTL (a
/// renewal of it gives the store's time at each look).
struct StoreClock {
    lease: Lease,
}

impl StoreClock {
    fn start<B: LockBackend + ?Sized>(backend: &B) -> Self {
        let lease = acquired(backend, &unique_key("line-clock"), LONG_TTL);
        StoreClock { lease }
    }

    /// The store's time now, in Unix ms.
    fn now_ms<B: LockBackend + ?Sized>(&self, backend: &B) -> i64 {
        let expires_at_ms = backend
            .extend(&self.lease.lock_id, LONG_TTL)
            .unwrap()
            .expect("the clock's lease is held");
        expires_at_ms - i64::try_from(LONG_TTL.as_millis()).unwrap()
    }

    fn stop<B: LockBackend + ?Sized>(self, backend: &B) {
        assert!(backend.release(&self.lease.lock_id).unwrap());
    }
}

fn still_in_line<B: LockBackend + ?Sized>(backend: &B, key: &str, place: &LockId) -> bool {
    let checked = Key::new(key).unwrap();
    let line = backend.find_line(&checked, LeaseKind::Lock).unwrap();
    line.iter().any(|p| p.place_id == place.as_str())
}

fn still_in_permit_line<B: LockBackend + ?Sized>(backend: &B, key: &str, place: &LockId) -> bool {
    let checked = Key::new(key).unwrap();
    let line = backend.find_line(&checked, LeaseKind::Permit).unwrap();
    line.iter().any(|p| p.place_id == place.as_str())
}

fn places_other_than<B: LockBackend + ?Sized>(backend: &B, key: &str, place: &LockId) -> usize {
    let checked = Key::new(key).unwrap();
    let line = backend.find_line(&checked, LeaseKind::Lock).unwrap();
    line.iter().filter(|p| p.place_id != place.as_str()).count()
}
