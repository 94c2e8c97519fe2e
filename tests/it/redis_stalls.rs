//! A Redis server that stalls (SIGSTOP: the kernel keeps accepting its connections and
//! buffering requests, which it runs once continued — also those whose clients gave up): a
//! wait goes on through the timeouts, the acquisition the server ran late for nobody is
//! released, and the wait ends with the lock held, leaving nothing behind.

use std::thread;
use std::time::Duration;

use crate::support::stopped::Stopped;
use crate::support::{PATIENT, RedisServer};
use syncguard::redis::RedisBackend;
use syncguard::testing::recorder::{Call, Recorder};
use syncguard::testing::support::wait_until;
use syncguard::{LockBackend, LockOptions, Locker};

/// Calls that give up quickly, so a stall is a timeout.
fn brisk(server: &RedisServer) -> RedisBackend {
    RedisBackend::builder()
        .url(server.url())
        .connect_timeout(Duration::from_millis(300))
        .read_timeout(Duration::from_millis(300))
        .write_timeout(Duration::from_millis(300))
        .pool_timeout(Duration::from_secs(5))
        .build()
        .expect("a backend for the test server")
}

#[test]
fn a_wait_goes_on_through_a_stall_and_what_the_stall_took_is_released() {
    let server = RedisServer::start();
    let key = format!("stall:{}", syncguard::driver::generate_lock_id());
    let recorder = Recorder::new(brisk(&server));
    // A lease longer than the wait: only the release of the stalled attempt's lock lets the
    // wait succeed.
    let options = LockOptions::default()
        .ttl(Duration::from_secs(600))
        .timeout(Duration::from_secs(120));
    let locker = Locker::with_defaults(recorder.clone(), options);

    // A pooled connection and a loaded script before the stall: the first attempt's request
    // reaches the server's socket buffer whole (later attempts' new connections cannot finish
    // their handshake), to be run when the server goes on.
    drop(locker.try_lock("stall:warm-up").unwrap());
    let stopped = Stopped::redis(server.port);
    let waiter = thread::spawn({
        let (locker, key) = (locker.clone(), key.clone());
        move || locker.lock(&key).map(|guard| guard.release())
    });
    wait_until("two attempts timed out in the stall", PATIENT, || {
        recorder.count(&Call::Acquire(key.clone())) >= 2
    });
    // The server now runs what it buffered.
    drop(stopped);

    let released = waiter
        .join()
        .expect("the waiter did not panic")
        .expect("the wait ended with the lock held, not with the stall's timeout");
    assert_eq!(released.ok(), Some(true), "the waiter's own lock released");
    let released_ids: Vec<Call> = recorder
        .calls()
        .into_iter()
        .filter(|call| matches!(call, Call::Release(_)))
        .collect();
    // The warm-up's, the stalled attempt's (in doubt, from the background) and the waiter's.
    assert!(released_ids.len() >= 3, "{released_ids:?}");
    wait_until("no lock left behind", PATIENT, || {
        !locker.backend().is_locked(&key).unwrap_or(true)
    });
}
