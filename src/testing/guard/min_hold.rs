//! The guard contract for renewals inside a `min_hold`: the cron run-once pattern relies on
//! each of them asking the store for the rest of the hold, not for the lease's TTL.

use std::time::{Duration, Instant};

use crate::driver::TIME_TOLERANCE_MS;
use crate::{LockBackend, get_by_id};

use crate::testing::recorder::{Call, recorded_locker};
use crate::testing::support::{CLOCK_SLACK_MS, PATIENCE, short_lease, unique_key, wait_until};

/// `min_hold` through a crash inside the hold, after renewals: with a TTL far below the hold,
/// three renewals reach the store, then the holder dies ([`detach`](crate::LockGuard::detach):
/// renewals stop and nothing is released, as when its process is killed). The store's record
/// still ends with the hold, and a TTL and the tolerance after the kill the key is still held:
/// each renewal asked for the rest of the hold. A renewal asking for the TTL alone would have
/// cut the record down to a TTL past the last renewal.
pub fn min_hold_renewals_keep_the_hold_after_a_crash<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("min-hold-renewals");
    let ttl = Duration::from_millis(1_000);
    // Far beyond what the renewals and the wait after the kill take on a loaded machine, so
    // that the key is looked at inside the hold.
    let hold = Duration::from_secs(8);
    let (locker, recorder) = recorded_locker(backend, short_lease(1_000, 250).min_hold(hold));
    let acquired = Instant::now();
    let guard = locker.lock(&key).unwrap();
    let hold_until_ms = guard
        .min_hold_until_ms()
        .expect("the guard knows its hold's end");
    let renewal = Call::Extend(guard.lock_id().to_owned());
    // A lease's next renewal begins only once the one before came back: four begun, three
    // answered.
    wait_until("three renewals inside the hold", PATIENCE, || {
        recorder.count(&renewal) >= 4
    });
    guard.check().expect("the renewals kept the lease");
    // The kill; waits for a renewal in flight to come back, so what the store holds is what the
    // renewals left.
    let lease = guard.detach();
    let killed = Instant::now();
    let renewals = recorder.count(&renewal);

    let record = get_by_id(locker.backend(), &lease.lock_id)
        .unwrap()
        .expect("the killed holder's lock is still stored");
    assert!(
        record.expires_at_ms + CLOCK_SLACK_MS >= hold_until_ms,
        "after {renewals} renewals the record ends at {}, before the hold's end {hold_until_ms}: \
         a renewal inside the hold asked for less than the rest of the hold",
        record.expires_at_ms
    );
    let lapsed_by = ttl + Duration::from_millis(TIME_TOLERANCE_MS.unsigned_abs()) * 2;
    wait_until(
        "a TTL and the tolerance to pass since the kill",
        PATIENCE,
        || killed.elapsed() > lapsed_by,
    );
    let held = locker.backend().is_locked(&key).unwrap();
    let taken = locker.try_lock(&key).unwrap();
    // Only a look that ended inside the hold says anything about it.
    if acquired.elapsed() < hold {
        assert!(
            held && taken.is_none(),
            "{key}: free a TTL after the kill, inside its min_hold"
        );
    }
    drop(taken);
    assert_eq!(
        recorder.count(&renewal),
        renewals,
        "a renewal after the kill"
    );
    let _ = locker.backend().release(&lease.lock_id);
}
