//! The contracts of several keys held together ([`Locker::lock_all`]): all or none, no
//! deadlock whatever order callers name the keys in (through their waits too: one order on
//! every line, [`Line::WaitAt`]), waiting its turn and leaving the lines when giving up, a fence per key,
//! lost as a whole, released as a whole, and bad input refused before any I/O. Each takes the
//! backend by value; several [`Locker`]s share it through an `Arc`, as several processes share
//! a store.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use crate::driver::{Acquisitions, Key, KeySet, LeaseKind, Line, LockId, MAX_KEYS, Request, Ttl};
use crate::{CancelToken, ErrorCode, LockBackend, LockOptions, Locker};

use super::recorder::{Call, recorded_locker};
use super::support::{
    CONTENTION_DEADLINE, LONG_TTL, PATIENCE, acquired, places, short_lease, unique_key, wait_until,
};

/// One key of a set held elsewhere: a single attempt on the set is refused and takes none of
/// the free keys; once it is given back, the set is taken whole, each key with its own fence
/// from its own sequence, in one order whatever the order asked in.
pub fn all_or_none<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("multi-all");
    let [a, b, c] = ["a", "b", "c"].map(|suffix| format!("{prefix}:{suffix}"));
    let locker = Locker::new(Arc::new(backend));
    let other = Locker::new(Arc::clone(locker.backend()));
    let held = other.lock(&b).unwrap();
    assert!(locker.try_lock_all(&[&c, &b, &a]).unwrap().is_none());
    for free in [&a, &c] {
        assert!(
            !locker.backend().is_locked(free).unwrap(),
            "a refused set left a key held"
        );
    }
    let b_fence = *held.fence();
    drop(held);
    let all = locker
        .try_lock_all(&[&c, &b, &a, &b])
        .unwrap()
        .expect("all free");
    assert_eq!(all.keys(), [a.as_str(), b.as_str(), c.as_str()]);
    assert!(
        all.fence(&b).unwrap() > &b_fence,
        "b's own sequence goes on"
    );
    for key in [&a, &b, &c] {
        assert!(locker.backend().is_locked(key).unwrap());
        assert!(other.try_lock(key).unwrap().is_none());
    }
    let fences: Vec<_> = all.fences().into_iter().copied().collect();
    assert!(all.release().unwrap());
    let again = locker.lock_all(&[&a, &b, &c]).unwrap();
    for (before, now) in fences.iter().zip(again.fences()) {
        assert!(now > before, "each key's fence grows");
    }
}

/// Callers taking `{a, b}`, `{b, a}`, `a` and `b` over and over from threads of their own: every
/// call is granted within the contention deadline (no deadlock), and no key ever has two
/// holders at once.
pub fn reversed_orders_do_not_deadlock<B: LockBackend + 'static>(backend: B) {
    const ROUNDS: usize = 8;
    let prefix = unique_key("multi-order");
    let [a, b] = ["a", "b"].map(|suffix| format!("{prefix}:{suffix}"));
    let backend = Arc::new(backend);
    let inside = [AtomicUsize::new(0), AtomicUsize::new(0)];
    let most = AtomicUsize::new(0);
    let sets: [Vec<usize>; 4] = [vec![0, 1], vec![1, 0], vec![0], vec![1]];
    thread::scope(|scope| {
        for set in &sets {
            let locker = Locker::new(Arc::clone(&backend));
            let b_key = b.as_str();
            let (keys, inside, most) = (
                set.iter().map(|&n| [&a, &b][n].clone()).collect::<Vec<_>>(),
                &inside,
                &most,
            );
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let guard = locker
                        .try_lock_all_for(&keys, CONTENTION_DEADLINE)
                        .unwrap()
                        .unwrap_or_else(|| panic!("{keys:?} round {round}: never granted"));
                    let entered: Vec<&AtomicUsize> = guard
                        .keys()
                        .iter()
                        .map(|key| &inside[usize::from(*key == b_key)])
                        .collect();
                    for count in &entered {
                        most.fetch_max(count.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                    }
                    thread::sleep(Duration::from_millis(2));
                    guard.check().unwrap();
                    for count in &entered {
                        count.fetch_sub(1, Ordering::SeqCst);
                    }
                    guard.release().unwrap();
                }
            });
        }
    });
    assert_eq!(
        most.load(Ordering::SeqCst),
        1,
        "two holders of one key at once"
    );
}

/// Two of three keys taken away from outside: the set is lost as a whole — `is_lost`, `check`
/// fails with `LockLost`, its lost token is cancelled and `on_lock_lost` runs once — while the
/// key still held stays held until the set is released.
pub fn losing_one_key_loses_the_set<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("multi-lost");
    let keys = ["a", "b", "c"].map(|suffix| format!("{prefix}:{suffix}"));
    let lost = Arc::new(AtomicUsize::new(0));
    // Renewed every 500 ms: often enough to see the loss soon, seldom enough that the releases
    // from outside do not keep losing their commit to a renewal (Firestore).
    let options = short_lease(3_000, 500).on_lock_lost({
        let lost = Arc::clone(&lost);
        move |_| {
            lost.fetch_add(1, Ordering::SeqCst);
        }
    });
    let locker = Locker::new(backend);
    let all = locker.lock_all_with(&keys, &options).unwrap();
    let token = all.lost_token();
    all.check().unwrap();
    for guard in &all.guards()[1..] {
        assert!(locker.backend().release(guard.lock_id()).unwrap());
    }
    wait_until("the set to be lost", PATIENCE, || all.is_lost());
    assert_eq!(all.check().unwrap_err().code(), ErrorCode::LockLost);
    assert!(token.is_cancelled());
    wait_until("both losses to be reported", PATIENCE, || {
        all.guards()[1..].iter().all(|guard| guard.is_lost())
    });
    assert_eq!(lost.load(Ordering::SeqCst), 1, "on_lock_lost runs once");
    assert!(!all.guards()[0].is_lost(), "the key still held stays held");
    assert!(locker.backend().is_locked(&keys[0]).unwrap());
    assert!(!all.release().unwrap(), "two keys were gone");
    assert!(!locker.backend().is_locked(&keys[0]).unwrap());
}

/// `release`, `Drop` and `detach`: the first two free every key, the last leaves every lease in
/// the store and answers them in the set's order.
pub fn released_as_a_whole<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("multi-release");
    let keys = ["x", "y", "z"].map(|suffix| format!("{prefix}:{suffix}"));
    let locker = Locker::new(backend);
    let free = |locker: &Locker<B>| {
        keys.iter()
            .all(|key| !locker.backend().is_locked(key).unwrap())
    };
    assert!(locker.lock_all(&keys).unwrap().release().unwrap());
    assert!(free(&locker));
    drop(locker.lock_all(&keys).unwrap());
    assert!(free(&locker));
    let options = LockOptions::default().ttl(LONG_TTL);
    let leases = locker.lock_all_with(&keys, &options).unwrap().detach();
    assert_eq!(leases.len(), keys.len());
    for (key, lease) in keys.iter().zip(&leases) {
        let info = crate::get_by_id_raw(locker.backend(), &lease.lock_id)
            .unwrap()
            .expect("a detached lease stays");
        assert_eq!(info.key, *key);
        assert!(locker.backend().release(&lease.lock_id).unwrap());
    }
}

/// No key, more than [`MAX_KEYS`] distinct ones, or an invalid key among valid ones: refused
/// with `InvalidArgument` before anything is sent, and no key is held after.
pub fn bad_input_is_refused_before_any_io<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    let prefix = unique_key("multi-bad");
    let too_many: Vec<String> = (0..=MAX_KEYS).map(|n| format!("{prefix}:{n}")).collect();
    let valid = format!("{prefix}:valid");
    let too_long = "k".repeat(crate::driver::MAX_KEY_LENGTH_BYTES + 1);
    let refusals = [
        locker.try_lock_all::<&str>(&[]).map(|_| ()),
        locker.try_lock_all(&too_many).map(|_| ()),
        locker.try_lock_all(&[valid.as_str(), ""]).map(|_| ()),
        locker
            .lock_all(&[too_long.as_str(), valid.as_str()])
            .map(|_| ()),
    ];
    for refusal in refusals {
        assert_eq!(refusal.unwrap_err().code(), ErrorCode::InvalidArgument);
    }
    assert!(
        !recorder
            .calls()
            .iter()
            .any(|call| matches!(call, Call::Acquire(_))),
        "bad input reached the store"
    );
    assert!(!locker.backend().is_locked(&valid).unwrap());
    // The most keys a set takes are taken.
    let most = locker
        .try_lock_all(&too_many[..MAX_KEYS])
        .unwrap()
        .expect("64 free keys");
    assert_eq!(most.keys().len(), MAX_KEYS);
}

/// Two waiters of the same two keys, the first standing in line on one key before the second
/// arrives, then on the other after: with one ticket per waiter they stand in one order on
/// both lines, and once the keys are free the first is granted — with a ticket per line it
/// would stand behind the second on one key and before it on the other, each waiting for the
/// other forever. Played through the driver ([`Line::Wait`], then [`Line::WaitAt`] with the
/// ticket answered), so every store and every way of taking a set is held to it.
pub fn waiters_of_sets_stand_in_one_order<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("multi-order-line");
    let [a, b] = ["a", "b"].map(|suffix| format!("{prefix}:{suffix}"));
    let keys = KeySet::new(&[&a, &b]).unwrap();
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let (first, second) = (LockId::generate(), LockId::generate());
    let stand = |who: &str, line: Line<'_>| match backend
        .try_acquire(&Request::all(&keys, ttl).line(line))
    {
        Ok(Acquisitions::Locked {
            ticket: Some(ticket),
            ..
        }) => ticket,
        other => panic!("the {who} waiter was to stand in line: {other:?}"),
    };
    let held_a = acquired(&backend, &a, LONG_TTL);
    let first_ticket = stand("first", Line::Wait(&first));
    let held_b = acquired(&backend, &b, LONG_TTL);
    let second_ticket = stand("second", Line::Wait(&second));
    assert_eq!(
        stand("first", Line::WaitAt(&first, first_ticket)),
        first_ticket,
        "a waiter keeps its ticket"
    );
    for key in [&a, &b] {
        let line = backend
            .find_line(&Key::new(key).unwrap(), LeaseKind::Lock)
            .unwrap();
        let order: Vec<_> = line
            .iter()
            .filter_map(|p| {
                [&first, &second]
                    .iter()
                    .position(|w| p.place_id == w.as_str())
            })
            .collect();
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "the first waiter stands behind the second on {key}: {line:?}"
        );
    }
    assert!(backend.release(&held_a.lock_id).unwrap());
    assert!(backend.release(&held_b.lock_id).unwrap());
    let granted = match backend
        .try_acquire(&Request::all(&keys, ttl).line(Line::WaitAt(&first, first_ticket)))
    {
        Ok(Acquisitions::Acquired(leases)) => leases,
        other => panic!("the first waiter was not granted the free keys: {other:?}"),
    };
    for (lease, _) in granted {
        assert!(backend.release(&lease.lock_id).unwrap());
    }
    match backend.try_acquire(&Request::all(&keys, ttl).line(Line::WaitAt(&second, second_ticket)))
    {
        Ok(Acquisitions::Acquired(leases)) => {
            for (lease, _) in leases {
                assert!(backend.release(&lease.lock_id).unwrap());
            }
        }
        other => panic!("the second waiter was not granted next: {other:?}"),
    }
    for key in [&a, &b] {
        assert!(
            backend.waiters(key, LeaseKind::Lock).unwrap().is_empty(),
            "a place left on {key}"
        );
    }
}

/// A set waits its turn: a waiter of `{a, b}` that came before a waiter of `a` alone is served
/// first (by their fences on `a`), and a waiter of a set that gives up — cancelled, or out of
/// time — leaves every key's line before its call returns.
pub fn a_set_waits_its_turn_and_leaves_when_it_gives_up<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("multi-turn");
    let [a, b] = ["a", "b"].map(|suffix| format!("{prefix}:{suffix}"));
    let locker = Locker::new(Arc::new(backend));
    let held = locker.lock(&a).unwrap();
    let waiting = LockOptions::default().timeout(CONTENTION_DEADLINE);
    let set = thread::spawn({
        let (locker, keys, options) = (locker.clone(), [a.clone(), b.clone()], waiting.clone());
        move || {
            let all = locker
                .lock_all_with(&keys, &options)
                .expect("the set is granted");
            *all.fence(&keys[0]).unwrap()
        }
    });
    wait_until("the set's waiter to stand in line", PATIENCE, || {
        places(locker.backend(), &a, LeaseKind::Lock).len() == 1
    });
    let single = thread::spawn({
        let (locker, key, options) = (locker.clone(), a.clone(), waiting.clone());
        move || {
            *locker
                .lock_with(&key, &options)
                .expect("a is granted")
                .fence()
        }
    });
    wait_until("the single waiter to stand behind it", PATIENCE, || {
        places(locker.backend(), &a, LeaseKind::Lock).len() == 2
    });
    drop(held);
    let (set_fence, single_fence) = (set.join().unwrap(), single.join().unwrap());
    assert!(
        set_fence < single_fence,
        "the set came first and was served first"
    );

    let held = [locker.lock(&a).unwrap(), locker.lock(&b).unwrap()];
    let cancel = CancelToken::new();
    let cancelled = thread::spawn({
        let (locker, keys) = (locker.clone(), [a.clone(), b.clone()]);
        let options = LockOptions::default().cancel(cancel.clone());
        move || locker.lock_all_with(&keys, &options).map(drop)
    });
    wait_until("the set's waiter to stand in line", PATIENCE, || {
        !places(locker.backend(), &a, LeaseKind::Lock).is_empty()
    });
    cancel.cancel();
    assert_eq!(
        cancelled.join().unwrap().unwrap_err().code(),
        ErrorCode::Aborted
    );
    let timed_out = locker.try_lock_all_for(&[&a, &b], Duration::from_millis(300));
    assert!(timed_out.unwrap().is_none());
    for key in [&a, &b] {
        assert!(
            places(locker.backend(), key, LeaseKind::Lock).is_empty(),
            "a waiter that gave up left a place on {key}"
        );
    }
    drop(held);
}
