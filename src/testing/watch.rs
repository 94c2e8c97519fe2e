//! The watch contracts: what [`Locker::watch`] promises on every backend. The first state is
//! the current one; under a stream of acquisitions and releases from another locker every
//! reported state really happened, in order, and the watch ends on the final state; a release
//! and an expiry are reported as such; a watch holds nothing and takes no place in line;
//! [`Locker::wait_until_free`] answers a release and a timeout; permits and shared holders are
//! watched by their kind.

use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use crate::{
    ErrorCode, Fence, KeyState, LeaseKind, LockBackend, LockInfo, LockOptions, Locker,
    WATCH_POLL_INTERVAL, Watch,
};

use super::support::{
    CONTENTION_DEADLINE, LONG_TTL, PATIENCE, acquired, assert_invalid, next_state, places,
    unique_key, wait_until,
};

/// How many acquisitions and releases the stream of [`every_state_reported_happened_in_order`]
/// makes.
const CYCLES: usize = 200;

/// The holders of a `Held` state; fails the test on any other.
fn holders(state: KeyState, what: &str) -> Vec<LockInfo> {
    match state {
        KeyState::Held { holders } => holders,
        other => panic!("{what}: expected the key held, got {other:?}"),
    }
}

/// The first free state of `watch`, past the states of holders leaving one by one.
fn until_free(watch: &mut Watch, what: &str) -> KeyState {
    loop {
        let state = next_state(watch, what);
        if state.is_free() {
            return state;
        }
        holders(state, what);
    }
}

/// The fences of `holders`, in their order.
fn fences(holders: &[LockInfo]) -> Vec<Fence> {
    holders.iter().map(|holder| holder.fence).collect()
}

/// The first state is the key's state now: free, or held by its holder (fence, holder text,
/// expiry); a bad key is refused before any I/O.
pub fn the_first_state_is_the_current_one<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("watch-first");
    let locker = Locker::with_defaults(backend, LockOptions::default().holder("host:1 watched"));
    assert_eq!(
        next_state(&mut locker.watch(&key).unwrap(), "a free key"),
        KeyState::Free
    );
    let guard = locker.lock(&key).unwrap();
    let held = holders(
        next_state(&mut locker.watch(&key).unwrap(), "a held key"),
        "a held key",
    );
    assert_eq!(held.len(), 1);
    assert_eq!(held[0].fence, *guard.fence());
    assert_eq!(held[0].holder.as_deref(), Some("host:1 watched"));
    assert_eq!(held[0].key_hash, crate::driver::hash_key(&key));
    assert!(held[0].expires_at_ms > held[0].acquired_at_ms);
    assert_invalid(locker.watch("").map(drop), "an empty key");
    assert_invalid(
        locker.watch(&"k".repeat(513)).map(drop),
        "a key over 512 bytes",
    );
}

/// Another locker takes and gives back the key 200 times (`CYCLES`), then holds it: every state the
/// watch reports happened, in order (each holder is one of the stream's, their fences only
/// grow, free states come only after a holder), and the watch ends on the final holder, then
/// on its release.
pub fn every_state_reported_happened_in_order<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("watch-cycles");
    let backend = Arc::new(backend);
    let watcher = Locker::new(Arc::clone(&backend));
    let mut watch = watcher.watch(&key).unwrap();
    assert_eq!(next_state(&mut watch, "before the stream"), KeyState::Free);
    let (granted, fences_granted) = mpsc::channel::<Fence>();
    let (release_last, last_released) = mpsc::channel::<()>();
    let cycler = thread::spawn({
        let (locker, key) = (Locker::new(Arc::clone(&backend)), key.clone());
        move || {
            for _ in 0..CYCLES {
                let guard = locker.lock(&key).unwrap();
                granted.send(*guard.fence()).unwrap();
                assert!(guard.release().unwrap());
            }
            let last = locker.lock(&key).unwrap();
            granted.send(*last.fence()).unwrap();
            last_released.recv().unwrap();
            assert!(last.release().unwrap());
        }
    });
    let mut reported = Vec::new();
    let mut granted: Vec<Fence> = Vec::new();
    let deadline = Instant::now() + CONTENTION_DEADLINE;
    let last = loop {
        granted.extend(fences_granted.try_iter());
        if let Some(&last) = granted.get(CYCLES)
            && matches!(reported.last(), Some(KeyState::Held { holders }) if fences(holders) == [last])
        {
            break last;
        }
        assert!(
            Instant::now() < deadline,
            "the watch never reached the stream's last holder: {reported:?}"
        );
        match watch.next_timeout(WATCH_POLL_INTERVAL) {
            Some(Ok(state)) => reported.push(state),
            Some(Err(error)) => panic!("during the stream: the watch failed: {error:?}"),
            None if cycler.is_finished() => match cycler.join() {
                Err(panic) => std::panic::resume_unwind(panic),
                Ok(()) => panic!("the stream ended unseen: {reported:?}"),
            },
            // No change yet: the stream's next fence may not have been sent.
            None => {}
        }
    };
    release_last.send(()).unwrap();
    let end = next_state(&mut watch, "after the last release");
    reported.push(end.clone());
    cycler.join().unwrap();
    assert_eq!(
        end,
        KeyState::Released,
        "the last holder's release ends the watch"
    );
    let mut before: Option<Fence> = None;
    let mut held_before = false;
    for state in &reported {
        match state {
            KeyState::Held { holders } => {
                assert_eq!(holders.len(), 1, "a lock has one holder: {state:?}");
                let fence = holders[0].fence;
                assert!(granted.contains(&fence), "{fence} was never granted");
                assert!(
                    before.is_none_or(|before| fence > before),
                    "fences went back: {reported:?}"
                );
                before = Some(fence);
                held_before = true;
            }
            KeyState::Released | KeyState::Expired => {
                assert!(held_before, "a free state after a free one: {reported:?}");
                held_before = false;
            }
            other => panic!("not a state of the stream: {other:?}"),
        }
    }
    assert_eq!(before, Some(last));
}

/// A release is reported as `Released` and a lease that runs out as `Expired`, though no one
/// announces an expiry.
pub fn a_release_and_an_expiry_are_reported_as_such<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("watch-ends");
    let locker = Locker::new(backend);
    let mut watch = locker.watch(&key).unwrap();
    assert_eq!(next_state(&mut watch, "a free key"), KeyState::Free);
    let lease = acquired(locker.backend(), &key, LONG_TTL);
    let held = holders(next_state(&mut watch, "acquired"), "acquired");
    assert_eq!(fences(&held), [lease.fence]);
    assert!(locker.backend().release(&lease.lock_id).unwrap());
    assert_eq!(next_state(&mut watch, "released"), KeyState::Released);
    // Long enough to be seen: a watch reads at least every poll interval, and a lease that
    // comes and goes between two reads is merged away.
    let short = acquired(locker.backend(), &key, WATCH_POLL_INTERVAL * 3);
    let held = holders(next_state(&mut watch, "acquired again"), "acquired again");
    assert_eq!(fences(&held), [short.fence]);
    assert_eq!(next_state(&mut watch, "left to expire"), KeyState::Expired);
}

/// A watch holds nothing and stands in no line: a waiter keeps its place and gets the key when
/// the holder leaves, the watch reporting each holder; a watched free key is taken at once.
pub fn a_watch_holds_nothing_and_takes_no_place<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("watch-line");
    let locker = Locker::with_defaults(Arc::new(backend), LockOptions::default().timeout(PATIENCE));
    let mut watch = locker.watch(&key).unwrap();
    assert_eq!(next_state(&mut watch, "a free key"), KeyState::Free);
    let holder = locker
        .try_lock(&key)
        .unwrap()
        .expect("a watched key is free");
    assert!(places(locker.backend(), &key, LeaseKind::Lock).is_empty());
    let waiter = thread::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        move || locker.lock(&key)
    });
    wait_until("the waiter in line", PATIENCE, || {
        places(locker.backend(), &key, LeaseKind::Lock).len() == 1
    });
    let mut second = locker.watch(&key).unwrap();
    let seen = holders(next_state(&mut second, "a second watch"), "a second watch");
    assert_eq!(fences(&seen), [*holder.fence()]);
    assert_eq!(
        places(locker.backend(), &key, LeaseKind::Lock).len(),
        1,
        "watches took places in line"
    );
    let first = *holder.fence();
    drop(holder);
    let waiter = waiter.join().unwrap().expect("the waiter gets the key");
    let waiter_fence = *waiter.fence();
    assert!(waiter_fence > first);
    for watch in [&mut watch, &mut second] {
        loop {
            let state = next_state(watch, "the waiter's turn");
            if let KeyState::Held { holders } = &state
                && fences(holders) == [waiter_fence]
            {
                break;
            }
        }
    }
}

/// `wait_until_free` answers `true` at once on a free key and after a release, and `false` at
/// its timeout on a held key.
pub fn wait_until_free_answers_a_release_and_a_timeout<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("watch-free");
    let locker = Locker::new(backend);
    assert!(locker.wait_until_free(&key, PATIENCE).unwrap());
    let guard = locker.lock(&key).unwrap();
    assert!(
        !locker
            .wait_until_free(&key, Duration::from_millis(300))
            .unwrap(),
        "a held key is not free at the timeout"
    );
    let mut watch = locker.watch(&key).unwrap();
    let waiting = thread::spawn(move || watch.wait_until_free(PATIENCE));
    drop(guard);
    assert!(
        waiting.join().unwrap().unwrap(),
        "free once it was released"
    );
    let cancel = crate::CancelToken::new();
    let _held = locker.lock(&key).unwrap();
    let mut cancelled = locker.watch(&key).unwrap().with_cancel(cancel.clone());
    cancel.cancel();
    assert_eq!(
        cancelled.wait_until_free(PATIENCE).unwrap_err().code(),
        ErrorCode::Aborted
    );
    assert!(cancelled.next().is_none(), "a cancelled watch ends");
}

/// A semaphore's permits and a lock's shared holders are watched by their kind, in fence
/// order; a lock watch sees the shared holders, and nothing of the semaphore.
pub fn permits_and_shared_holders_are_watched_by_kind<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("watch-kinds");
    let locker = Locker::new(backend);
    let semaphore = locker.semaphore(&key, 2).unwrap();
    let mut permits = locker.watch_as(&key, LeaseKind::Permit).unwrap();
    assert_eq!(next_state(&mut permits, "no permits"), KeyState::Free);
    let first = semaphore.acquire().unwrap();
    let second = semaphore.acquire().unwrap();
    let both = [*first.fence(), *second.fence()];
    loop {
        let held = holders(next_state(&mut permits, "two permits"), "two permits");
        assert!(held.iter().all(|permit| both.contains(&permit.fence)));
        if held.len() == 2 {
            assert_eq!(fences(&held), both, "in fence order");
            break;
        }
    }
    assert_eq!(
        next_state(&mut locker.watch(&key).unwrap(), "the lock beside permits"),
        KeyState::Free
    );
    drop(first);
    let left = holders(next_state(&mut permits, "one released"), "one released");
    assert_eq!(fences(&left), [both[1]]);
    drop(second);
    assert_eq!(next_state(&mut permits, "none left"), KeyState::Released);

    let rw = locker.rw_lock(&key).unwrap();
    let readers = [rw.read().unwrap(), rw.read().unwrap()];
    let read = [*readers[0].fence(), *readers[1].fence()];
    let mut shared = locker.watch_as(&key, LeaseKind::Shared).unwrap();
    let held = holders(next_state(&mut shared, "two readers"), "two readers");
    assert_eq!(fences(&held), read);
    let mut lock = locker.watch(&key).unwrap();
    let held = holders(next_state(&mut lock, "the lock's readers"), "readers");
    assert_eq!(fences(&held), read, "a lock watch sees its shared holders");
    drop(readers);
    assert_eq!(until_free(&mut shared, "readers gone"), KeyState::Released);
    assert_eq!(until_free(&mut lock, "readers gone"), KeyState::Released);
}
