//! The guard contract for one stuck renewal among others: the heartbeat renews a `Locker`'s
//! leases on several workers, so a request that never comes back holds up only the leases it
//! carries.

use crate::LockBackend;

use crate::testing::recorder::{Call, recorded_locker};
use crate::testing::support::{PATIENCE, short_lease, unique_key, wait_until};

/// While one lease's renewal hangs in its call (a request that never comes back), the
/// `Locker`'s other leases are renewed all the same, three times each, and the stuck lease is
/// reported lost at its deadline. The others are taken once the call hangs, so no renewal of
/// theirs shares that call: what holds them up can only be the heartbeat waiting for it.
pub fn one_stuck_renewal_holds_up_no_other_lease<B: LockBackend + 'static>(backend: B) {
    let (locker, recorder) = recorded_locker(backend, short_lease(3_000, 100));
    let stuck = locker
        .lock_with(&unique_key("stuck-renewal"), &short_lease(1_000, 100))
        .unwrap();
    recorder.hang_renewals_of(Some(stuck.lock_id()));
    // Dropped before the stuck guard, whose drop waits for its renewal to come back: a failed
    // assertion below must fail the test, not hang it.
    let _let_go = LetGo(|| recorder.hang_renewals_of(None));
    wait_until("the stuck lease's renewal to hang", PATIENCE, || {
        recorder.renewals_hanging() >= 1
    });
    let others: Vec<_> = (0..3)
        .map(|i| {
            locker
                .lock(&unique_key(&format!("beside-the-stuck-{i}")))
                .unwrap()
        })
        .collect();
    wait_until(
        "each other lease renewed three times while the call hangs",
        PATIENCE,
        || {
            others
                .iter()
                .all(|guard| recorder.count(&Call::Extend(guard.lock_id().to_owned())) >= 3)
        },
    );
    let still_hanging = recorder.renewals_hanging() >= 1;
    wait_until("the stuck lease to be reported lost", PATIENCE, || {
        stuck.is_lost()
    });
    for guard in &others {
        guard.check().expect("renewed beside the stuck call");
    }
    recorder.hang_renewals_of(None);
    assert!(
        still_hanging,
        "the stuck call came back before the others were renewed"
    );
    for guard in others {
        assert!(guard.release().unwrap());
    }
    let _ = stuck.release();
}

/// Runs its closure when dropped.
struct LetGo<F: FnMut()>(F);

impl<F: FnMut()> Drop for LetGo<F> {
    fn drop(&mut self) {
        (self.0)();
    }
}
