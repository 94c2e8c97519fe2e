//! What the areas share for faults: stopped servers and exhausted pools.

use syncguard::{ErrorCode, LockBackend, LockError};

use super::{TTL, lease, unique, within_a_minute};

/// Runs `call` on another thread and fails the test unless it ends, within a minute, in a
/// `ServiceUnavailable` error; returns the error for more checks.
#[track_caller]
pub fn unavailable_within_a_minute<T: std::fmt::Debug + Send + 'static>(
    call: impl FnOnce() -> syncguard::Result<T> + Send + 'static,
) -> LockError {
    let err = within_a_minute(call).expect_err("the call should fail");
    assert_eq!(err.code(), ErrorCode::ServiceUnavailable, "{err}");
    err
}

#[cfg(any(feature = "redis", feature = "postgres"))]
/// An application's pool of one connection, whose checkout gives up after 300 ms, returned
/// once its connection is open: opening it is not bound by those 300 ms (a loaded machine may
/// take longer), only waiting for it once it is taken.
pub fn pool_of_one<M: r2d2::ManageConnection>(manager: M) -> r2d2::Pool<M> {
    let pool = r2d2::Pool::builder()
        .max_size(1)
        .test_on_check_out(false)
        .connection_timeout(std::time::Duration::from_millis(300))
        .build_unchecked(manager);
    // The pool opens its connection in the background, retrying until it is open.
    syncguard::testing::support::wait_until(
        "the pool's connection to open",
        super::PATIENT,
        || pool.state().idle_connections == 1,
    );
    pool
}

/// `backend` works through the application's [`pool_of_one`]: while `hog` holds its one
/// connection a call is `RateLimited` (the error is returned for more checks); once the
/// connection is back, acquire and release work.
pub fn exhausted_pool_is_rate_limited<C>(backend: &dyn LockBackend, hog: C) -> LockError {
    let err = backend.is_locked(&unique("busy")).unwrap_err();
    assert_eq!(err.code(), ErrorCode::RateLimited, "{err}");
    drop(hog);
    let lease = lease(backend.acquire(&unique("app-pool"), TTL));
    assert!(backend.release(&lease.lock_id).unwrap());
    err
}
