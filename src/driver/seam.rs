//! The seam between the crate and a store: [`Driver`], eleven methods. See the
//! [module docs](super).

use std::sync::Arc;

use super::breaking::{BreakOrder, Broken};
use super::capabilities::Capabilities;
use super::lease::{Extension, LeaseKind, LeaseRef, Outcome};
use super::records::{Find, LockRecord};
use super::request::{Acquisitions, Request};
use crate::error::Result;
use crate::key::Key;
use crate::line::PlaceRecord;
use crate::listing::{KeyPrefix, ListLimit, LockList};
use crate::lock_id::LockId;
use crate::time::Ttl;

/// One store's lock protocol, over validated values. See the [module docs](super).
///
/// Each method is a single attempt: no retries (the [`Locker`](crate::Locker) retries), and a
/// deadline on every network call. Errors are [`LockError`](crate::LockError)s with the code
/// the failure implies; an absent or expired lock is an [`Outcome`], not an error. Six methods
/// are required; the line, listing and the watch for releases have defaults for a store
/// without them.
pub trait Driver: Send + Sync {
    /// What this store is and guarantees: among it, the modes it takes and whether it decides
    /// several keys in one step.
    fn describe(&self) -> Capabilities;

    /// Takes what `request` asks for on each of its keys, all or none: for each key a fresh
    /// lock id and the next fence of the key's sequence (the lock's, or the semaphore's), the
    /// expiry from the store's time authority and `request.holder` stored with the lease —
    /// or none of them, [`Acquisitions::Locked`], when a key is held beyond what the mode
    /// allows (or its line goes first). See [`Mode`](crate::driver::Mode) for what each mode may share a key with.
    ///
    /// A store is only asked for modes it declares ([`Capabilities`]), and for several keys
    /// only in exclusive mode when it declares [`native_sets`](Capabilities::native_sets): the
    /// crate calls it through [`acquire`](crate::driver::acquire), which refuses or splits the rest.
    ///
    /// `request.line` says how the keys' lines of waiters are heeded (see [`Line`](crate::driver::Line): a lock
    /// has one slot, a semaphore one per free permit; several keys follow [`admit_all`](crate::driver::admit_all)). A
    /// store without a line ([`find_line`](Driver::find_line) left at its default) treats
    /// every line as [`Line::Ignore`](crate::driver::Line::Ignore). An acquisition that finds the key free and its line
    /// empty writes nothing but the lease, in the one round trip it always made.
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions>;

    /// Deletes the lease `lease` names if it is stored under its lock id. `Applied` only when
    /// it was live; an expired one is removed too, and answered [`Outcome::Expired`]. A
    /// release is announced to [`watch_releases`](Driver::watch_releases) with the key.
    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>>;

    /// Sets the expiry of each live lease named to *now +* its own TTL; one answer per lease,
    /// in order. A lease named [`with_holder`](LeaseRef::with_holder) also has its holder text
    /// replaced (a leader's proclaim; a lock's only — `InvalidArgument` for a permit or shared
    /// hold). The heartbeat renews through it, and a guard's extension is a batch of one
    /// ([`DriverExt::extend_lease`](crate::driver::DriverExt::extend_lease)); a store that can do many in one request should.
    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>>;

    /// Whether a live lock is stored under `key`.
    fn key_is_locked(&self, key: &Key) -> Result<bool>;

    /// The live leases looked up ([`Find`]), with their raw values: none or one for a lock,
    /// the permits or shared holders of a key in fence order. Expired and missing alike are
    /// not there.
    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>>;

    /// The live leases of `kind` whose key starts with `prefix`, with their raw values: sorted
    /// by key (byte order, then fence), at most `limit`, and whether that is all of them
    /// ([`Coverage`](crate::driver::Coverage)). Read only, with bounded work: a store that cannot find keys by prefix
    /// cheaply stops at a bound it documents and answers [`Coverage::WorkBoundReached`](crate::driver::Coverage::WorkBoundReached). A
    /// lock's key appears at most once.
    ///
    /// The default refuses (`InvalidArgument`: this backend cannot list); every bundled
    /// backend lists every kind.
    fn list_records(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let _ = (prefix, kind, limit);
        Err(crate::error::LockError::invalid_argument(format!(
            "the {} backend cannot list locks",
            self.describe().backend
        )))
    }

    /// The live places of the line of `key`'s lock or semaphore (`kind`: a shared hold waits
    /// in the lock's), in line order, with their raw values. Read only. The default (a store
    /// without a line) answers none.
    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        let _ = (key, kind);
        Ok(Vec::new())
    }

    /// Removes the place `place` from the line of `key`'s lock or semaphore (`kind`): its
    /// waiter gave up. Nothing when it is not there. The default (a store without a line) does
    /// nothing.
    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        let _ = (key, kind, place);
        Ok(())
    }

    /// An operator's forced release ([`BreakOrder`]), in one atomic step: removes the live
    /// holders of `order.kind` on `order.key` (or the one granted under `order.lock_id`)
    /// whatever their lock ids, and puts a marker lease in the place of each
    /// ([`breaking`](crate::driver::BreakOrder) has the rules: a lock id no acquisition
    /// draws, the next fence of the key's sequence, `order.note` as holder text, the delay's
    /// expiry from the store's time authority; none for [`BreakDelay::None`](crate::driver::BreakDelay::None)).
    /// A marker is never broken again, and an expired holder is removed but not answered.
    /// Announced to [`watch_releases`](Driver::watch_releases) like a release. The line is
    /// left as it is: a marker takes no place and passes none.
    ///
    /// The default refuses (`InvalidArgument`: this backend cannot break locks); every
    /// bundled backend breaks every kind.
    fn break_leases(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        let _ = order;
        Err(crate::error::LockError::invalid_argument(format!(
            "the {} backend cannot break locks",
            self.describe().backend
        )))
    }

    /// Starts hearing of releases, from any process, so that a [`Locker`](crate::Locker)'s
    /// waiters try again at once instead of at their next poll: `on_release` is called with
    /// the (normalised) key of each release heard, for the keys the returned [`ReleaseWatch`]
    /// is asked to watch. Dropping the watch stops it. `Ok(None)` (the default) when the store
    /// cannot tell; waiters then poll, as they also do for releases a watch misses (a lock that
    /// simply expired, a peer that does not announce its releases).
    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let _ = on_release;
        Ok(None)
    }
}

/// What [`Driver::watch_releases`] calls with the key of a release it heard of. Runs on the
/// watch's own thread: keep it short.
pub type OnRelease = Arc<dyn Fn(&str) + Send + Sync>;

/// A running watch for releases ([`Driver::watch_releases`]); dropping it stops the watch.
pub trait ReleaseWatch: Send + Sync {
    /// Reports releases of `key` from now on (a store that hears every release may ignore
    /// this). Each `watch` is balanced by an [`unwatch`](ReleaseWatch::unwatch).
    fn watch(&self, key: &Key);

    /// No longer needs releases of `key` reported.
    fn unwatch(&self, key: &Key);

    /// Whether releases are heard now: `false` while the watch's channel is down (lost, being
    /// reconnected, or found not to carry notifications, as behind a transaction pooler), so
    /// that the first waiters poll often meanwhile. The default: always.
    fn hearing(&self) -> bool {
        true
    }
}

/// `Box<dyn LockBackend>` and `Arc<B>` are drivers (and backends): every call goes to what
/// they hold.
macro_rules! forward_driver {
    ($($wrapper:ident),*) => {$(
        impl<D: Driver + ?Sized> Driver for $wrapper<D> {
            delegate_driver!(self, &**self; describe, try_acquire, release_lease,
                extend_leases, key_is_locked, find, list_records, find_line, leave_line,
                break_leases, watch_releases);
        }
    )*};
}

forward_driver!(Box, Arc);
