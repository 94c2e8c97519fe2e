//! Capacity checks: what a store holds at once, tested once per store rather than on every
//! topology by the contract macros (they test a store's layout, not its deployment, and a
//! document store needs a minute or two for them). Call each from a test of your own:
//!
//! ```ignore
//! #[test]
//! fn a_thousand_readers_share_a_key() {
//!     syncguard::testing::capacity::a_thousand_readers_share_a_key(my_backend());
//! }
//! ```

use std::time::Duration;

use crate::{AcquireOutcome, LockBackend};

use super::support::{LONG_TTL, unique_key};
use crate::driver::{LeaseKind, Mode};

/// How many readers [`a_thousand_readers_share_a_key`] holds at once.
pub const MANY_READERS: usize = 1000;

/// A key holds [`MANY_READERS`] readers at once, listed in fence order, and takes a writer
/// once they are gone.
pub fn a_thousand_readers_share_a_key<B: LockBackend + 'static>(backend: B) {
    let key = unique_key("rw-many");
    let mut lock_ids = Vec::with_capacity(MANY_READERS);
    // Long enough that the first readers outlive the taking of the last on a slow store (each
    // reader of a document store rewrites the key's document).
    let ttl = Duration::from_secs(600);
    for n in 0..MANY_READERS {
        match backend.acquire_as(&key, Mode::Shared, ttl).unwrap() {
            AcquireOutcome::Acquired(lease) => lock_ids.push(lease.lock_id),
            AcquireOutcome::Locked => panic!("reader {n} was refused"),
        }
    }
    let readers = backend.holders(&key, LeaseKind::Shared).unwrap();
    assert_eq!(readers.len(), MANY_READERS);
    assert!(readers.windows(2).all(|pair| pair[0].fence < pair[1].fence));
    assert_eq!(
        backend.acquire(&key, LONG_TTL).unwrap(),
        AcquireOutcome::Locked
    );
    for lock_id in &lock_ids {
        assert!(
            backend
                .release_as(&key, LeaseKind::Shared, lock_id)
                .unwrap()
        );
    }
    assert!(backend.acquire(&key, LONG_TTL).unwrap().lease().is_some());
}
