//! The shared-mode contracts: what [`Locker::rw_lock`](crate::Locker::rw_lock) and the shared
//! calls of [`LockBackend`] promise on a backend with a shared mode
//! ([`Mode::Shared`]): readers
//! overlap, a writer excludes them and they exclude a writer, fences order every grant of the
//! key, a writer in line is not starved by later readers, readers at the head of the line are
//! granted together, and one reader's loss, release or expiry leaves the others.

use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use crate::driver::{
    Acquisition, DriverExt as _, Key, LeaseKind, Line, LockId, Mode, Request, Ttl,
};
use crate::{AcquireOutcome, ErrorCode, Fence, LockBackend, LockOptions, Locker};

use super::recorder::{Call, recorded_locker};
use super::support::{
    CONTENTION_DEADLINE, EXPIRY_DEADLINE, LONG_TTL, PATIENCE, SHORT_TTL, assert_invalid, places,
    short_lease, unique_key, wait_until,
};

/// Two readers hold a key at once; while they do, neither `write`, a plain `lock` nor a
/// backend `acquire` gets it; once they are gone a writer does, and while it holds, no reader
/// gets in.
pub fn readers_share_and_exclude_a_writer<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("rw-share");
    let locker = Locker::new(backend);
    let rw = locker.rw_lock(&key).unwrap();
    let a = rw.read().unwrap();
    let b = rw.try_read().unwrap().expect("readers share the key");
    assert!(rw.try_write().unwrap().is_none(), "write beside readers");
    assert!(
        locker.try_lock(&key).unwrap().is_none(),
        "lock beside readers"
    );
    assert_eq!(
        locker.backend().acquire(&key, LONG_TTL).unwrap(),
        AcquireOutcome::Locked
    );
    assert!(
        !locker.backend().is_locked(&key).unwrap(),
        "readers are not the exclusive record"
    );
    let readers = rw.readers().unwrap();
    assert_eq!(readers.len(), 2);
    assert_eq!(readers[0].fence, *a.fence());
    assert_eq!(readers[1].fence, *b.fence());
    drop(a);
    assert!(rw.try_write().unwrap().is_none(), "one reader is left");
    assert!(b.release().unwrap());
    let writer = rw.try_write().unwrap().expect("free once the readers left");
    assert!(
        rw.try_read().unwrap().is_none(),
        "a reader beside the writer"
    );
    assert_eq!(
        locker
            .backend()
            .acquire_as(&key, Mode::Shared, LONG_TTL)
            .unwrap(),
        AcquireOutcome::Locked
    );
    assert!(writer.release().unwrap());
    assert!(rw.readers().unwrap().is_empty());
}

/// Shared and exclusive grants of one key draw on one fence counter: each grant's fence is
/// above every earlier one's, whatever their modes.
pub fn fences_order_every_grant_of_the_key<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("rw-fences");
    let locker = Locker::new(backend);
    let rw = locker.rw_lock(&key).unwrap();
    let mut fences: Vec<Fence> = Vec::new();
    for _ in 0..2 {
        let reader = rw.read().unwrap();
        fences.push(reader.fence().to_owned());
        let second = rw.read().unwrap();
        fences.push(second.fence().to_owned());
        drop((reader, second));
        let writer = rw.write().unwrap();
        fences.push(writer.fence().to_owned());
        drop(writer);
        fences.push(locker.lock(&key).unwrap().fence().to_owned());
    }
    let mut sorted = fences.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(
        fences, sorted,
        "fences grow with every grant, in either mode"
    );
}

/// A writer that waits in line behind readers is not passed by readers that come after it: it
/// is granted when the readers ahead leave, before the later ones (by fences), and a reader's
/// single attempt is refused while it waits.
pub fn a_waiting_writer_is_not_starved_by_later_readers<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("rw-starve");
    let locker = Locker::with_defaults(
        Arc::new(backend),
        LockOptions::default().timeout(CONTENTION_DEADLINE),
    );
    let rw = locker.rw_lock(&key).unwrap();
    let first = rw.read().unwrap();
    let writer = thread::spawn({
        let rw = rw.clone();
        move || rw.write().map(|guard| guard.fence().to_owned())
    });
    wait_until("the writer in line", PATIENCE, || {
        places(locker.backend(), &key, LeaseKind::Lock).len() == 1
    });
    assert!(
        rw.try_read().unwrap().is_none(),
        "a reader's try passed a writer in line"
    );
    let later = thread::spawn({
        let rw = rw.clone();
        move || rw.read().map(|guard| guard.fence().to_owned())
    });
    wait_until("the later reader in line", PATIENCE, || {
        places(locker.backend(), &key, LeaseKind::Lock).len() == 2
    });
    let line = places(locker.backend(), &key, LeaseKind::Lock);
    assert_eq!(
        line.iter().map(|place| place.shared).collect::<Vec<_>>(),
        [false, true],
        "the writer, then the reader"
    );
    drop(first);
    let writer_fence = writer.join().unwrap().unwrap();
    let reader_fence = later.join().unwrap().unwrap();
    assert!(writer_fence < reader_fence, "the writer was served first");
}

/// Readers waiting together at the head of the line, behind a writer, are granted together
/// when it leaves: all of them hold the key at once.
pub fn readers_at_the_head_are_granted_together<B: LockBackend + 'static>(backend: B) {
    const READERS: usize = 3;
    let key = unique_key("rw-together");
    let locker = Locker::with_defaults(
        Arc::new(backend),
        LockOptions::default().timeout(CONTENTION_DEADLINE),
    );
    let rw = locker.rw_lock(&key).unwrap();
    let writer = rw.write().unwrap();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let go_rx = Arc::new(Mutex::new(go_rx));
    let readers: Vec<_> = (0..READERS)
        .map(|n| {
            let (rw, go_rx) = (rw.clone(), Arc::clone(&go_rx));
            let reader = thread::spawn(move || {
                let guard = rw.read()?;
                // Hold until the test has seen every reader inside.
                let _ = go_rx.lock().unwrap().recv_timeout(CONTENTION_DEADLINE);
                guard.release()
            });
            wait_until(&format!("reader {n} in line"), PATIENCE, || {
                places(locker.backend(), &key, LeaseKind::Lock).len() > n
            });
            reader
        })
        .collect();
    drop(writer);
    wait_until("every reader inside at once", CONTENTION_DEADLINE, || {
        rw.readers().unwrap().len() == READERS
    });
    for _ in 0..READERS {
        go_tx.send(()).unwrap();
    }
    for reader in readers {
        assert!(reader.join().unwrap().unwrap());
    }
}

/// A writer that dies in line (its place taken, never renewed) holds a reader behind it up only
/// until its place lapses: the reader is not granted while the dead place is live, and is
/// granted after.
pub fn a_dead_waiting_writer_holds_readers_up_until_its_place_lapses<B: LockBackend + 'static>(
    backend: B,
) {
    let key = unique_key("rw-dead-writer");
    let locker = Locker::with_defaults(
        Arc::new(backend),
        LockOptions::default().timeout(CONTENTION_DEADLINE),
    );
    let rw = locker.rw_lock(&key).unwrap();
    let holding = rw.read().unwrap();
    let checked = Key::new(&key).unwrap();
    let dead = LockId::generate();
    let ttl = Ttl::new(LONG_TTL).unwrap();
    let answer = locker
        .backend()
        .acquire_one(&Request::one(&checked, ttl).line(Line::Wait(&dead)));
    assert_eq!(answer.unwrap(), Acquisition::Locked, "the readers hold it");
    let reader = thread::spawn({
        let rw = rw.clone();
        move || rw.read().map(drop)
    });
    wait_until("the reader in line", PATIENCE, || {
        places(locker.backend(), &key, LeaseKind::Lock).len() >= 2 || reader.is_finished()
    });
    drop(holding);
    let still_in_line = || {
        let line = locker
            .backend()
            .find_line(&checked, LeaseKind::Lock)
            .unwrap();
        line.iter().any(|place| place.place_id == dead.as_str())
    };
    let mut passed_it = false;
    wait_until(
        "the reader behind a dead writer",
        CONTENTION_DEADLINE,
        || {
            let finished = reader.is_finished();
            passed_it |= finished && still_in_line();
            finished
        },
    );
    assert!(!passed_it, "a reader passed a live writer's place");
    reader.join().unwrap().unwrap();
}

/// One reader's release, expiry or loss leaves the others' holds as they are: each reader is a
/// lease of its own, with no TTL shared by the set.
pub fn one_readers_end_leaves_the_others<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("rw-apart");
    let (lost_tx, lost_rx) = mpsc::channel();
    let lost_tx = Mutex::new(lost_tx);
    // A reader's renewal may be a read and a write of one document (Firestore): a lease long
    // enough for a slow store's renewals, short enough that the heartbeat shows.
    let options = short_lease(4_000, 200).on_lock_lost(move |error| {
        let _ = lost_tx.lock().unwrap().send(error.code());
    });
    let locker = Locker::with_defaults(backend, options);
    let rw = locker.rw_lock(&key).unwrap();
    let kept = rw.read().unwrap();
    let removed = rw.read().unwrap();
    let released = rw.read().unwrap();
    // A reader nobody renews: it expires on its own.
    let lapsing = locker
        .backend()
        .acquire_as(&key, Mode::Shared, SHORT_TTL)
        .unwrap()
        .lease()
        .expect("readers share");
    assert!(released.release().unwrap());
    assert!(
        locker
            .backend()
            .release_as(&key, LeaseKind::Shared, removed.lock_id())
            .unwrap()
    );
    assert_eq!(
        lost_rx
            .recv_timeout(PATIENCE)
            .expect("on_lock_lost was called"),
        ErrorCode::LockLost
    );
    assert!(removed.is_lost());
    wait_until("the unrenewed reader to expire", EXPIRY_DEADLINE, || {
        rw.readers().unwrap().len() == 1
    });
    let first_expiry = kept.expires_at_ms();
    wait_until("the heartbeat to renew the kept reader", PATIENCE, || {
        kept.expires_at_ms() > first_expiry
    });
    assert!(kept.check().is_ok(), "the kept reader was not touched");
    assert_eq!(rw.readers().unwrap()[0].fence, *kept.fence());
    assert!(
        !locker
            .backend()
            .release_as(&key, LeaseKind::Shared, &lapsing.lock_id)
            .unwrap()
    );
    assert!(kept.release().unwrap());
}

/// Shared holders are listed by prefix, apart from exclusive locks, with their holder texts.
pub fn shared_holds_are_listed<B: LockBackend + 'static>(backend: B) {
    let prefix = unique_key("rw-list");
    let locker = Locker::new(backend);
    let guards: Vec<_> = ["a", "b"]
        .iter()
        .map(|suffix| {
            let options = LockOptions::default().holder(format!("reader-{suffix}"));
            locker
                .rw_lock(&format!("{prefix}:{suffix}"))
                .unwrap()
                .read_with(&options)
                .unwrap()
        })
        .collect();
    let listed = locker
        .backend()
        .list_raw(&prefix, LeaseKind::Shared, 10)
        .unwrap();
    let keys: Vec<&str> = listed.locks.iter().map(|raw| raw.key.as_str()).collect();
    assert_eq!(keys, [format!("{prefix}:a"), format!("{prefix}:b")]);
    let holders: Vec<Option<&str>> = listed
        .locks
        .iter()
        .map(|raw| raw.info.holder.as_deref())
        .collect();
    assert_eq!(holders, [Some("reader-a"), Some("reader-b")]);
    assert!(
        locker
            .backend()
            .list_raw(&prefix, LeaseKind::Lock, 10)
            .unwrap()
            .locks
            .is_empty()
    );
    drop(guards);
}

/// Bad input is refused with `InvalidArgument` before anything reaches the store.
pub fn shared_input_is_checked_before_any_io<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, LockOptions::default());
    assert_invalid(locker.rw_lock("").map(drop), "rw_lock(\"\")");
    let rw = locker.rw_lock("rw-input").unwrap();
    let bad_ttl = LockOptions::default().ttl(Duration::ZERO);
    assert_invalid(rw.read_with(&bad_ttl).map(drop), "read with a zero TTL");
    assert_invalid(rw.write_with(&bad_ttl).map(drop), "write with a zero TTL");
    let backend = locker.backend();
    assert_invalid(
        backend.acquire_as("", Mode::Shared, LONG_TTL),
        "acquire_as(\"\", Mode::Shared)",
    );
    assert_invalid(
        backend.acquire_as("k", Mode::Shared, Duration::ZERO),
        "acquire_shared with a zero TTL",
    );
    assert_invalid(
        backend.release_as("k", LeaseKind::Shared, "not a lock id"),
        "release_shared with a bad lock id",
    );
    assert_invalid(backend.holders("", LeaseKind::Shared), "readers(\"\")");
    assert_eq!(recorder.count(&Call::Acquire("rw-input".to_owned())), 0);
    assert_eq!(recorder.count(&Call::Acquire("k".to_owned())), 0);
}
