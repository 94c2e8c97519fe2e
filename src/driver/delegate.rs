//! [`delegate_driver!`](crate::delegate_driver): the [`Driver`](crate::driver::Driver) methods
//! a wrapper hands on unchanged, written once for every wrapper.

/// Writes [`Driver`](crate::driver::Driver) methods that hand each call to an inner driver
/// unchanged: for a wrapper that changes some calls (telemetry, fault injection, counting) and
/// passes the rest through. Name the receiver (`self`), the inner driver as an expression of
/// it, then the methods:
///
/// ```
/// use syncguard::driver::{Acquisitions, Driver, Request};
/// use syncguard::MemoryBackend;
/// use std::sync::atomic::{AtomicUsize, Ordering};
///
/// /// Counts acquisitions; everything else goes through as it is.
/// struct Counting {
///     inner: MemoryBackend,
///     acquisitions: AtomicUsize,
/// }
///
/// impl Driver for Counting {
///     fn try_acquire(&self, request: &Request<'_>) -> syncguard::Result<Acquisitions> {
///         self.acquisitions.fetch_add(1, Ordering::Relaxed);
///         self.inner.try_acquire(request)
///     }
///     syncguard::delegate_driver!(self, &self.inner; describe, release_lease, extend_leases,
///         key_is_locked, find, list_records, find_line, leave_line, break_leases,
///         watch_releases);
/// }
/// ```
#[macro_export]
macro_rules! delegate_driver {
    ($self:tt, $inner:expr; $($method:ident),+ $(,)?) => {
        $($crate::delegate_driver!(@method $self, $inner, $method);)+
    };
    (@method $self:tt, $inner:expr, describe) => {
        fn describe(&$self) -> $crate::driver::Capabilities {
            $crate::driver::Driver::describe($inner)
        }
    };
    (@method $self:tt, $inner:expr, try_acquire) => {
        fn try_acquire(
            &$self,
            request: &$crate::driver::Request<'_>,
        ) -> $crate::Result<$crate::driver::Acquisitions> {
            $crate::driver::Driver::try_acquire($inner, request)
        }
    };
    (@method $self:tt, $inner:expr, release_lease) => {
        fn release_lease(
            &$self,
            lease: $crate::driver::LeaseRef<'_>,
        ) -> $crate::Result<$crate::driver::Outcome<()>> {
            $crate::driver::Driver::release_lease($inner, lease)
        }
    };
    (@method $self:tt, $inner:expr, extend_leases) => {
        fn extend_leases(
            &$self,
            leases: &[($crate::driver::LeaseRef<'_>, $crate::driver::Ttl)],
        ) -> Vec<$crate::Result<$crate::driver::Outcome<$crate::driver::Extension>>> {
            $crate::driver::Driver::extend_leases($inner, leases)
        }
    };
    (@method $self:tt, $inner:expr, key_is_locked) => {
        fn key_is_locked(&$self, key: &$crate::driver::Key) -> $crate::Result<bool> {
            $crate::driver::Driver::key_is_locked($inner, key)
        }
    };
    (@method $self:tt, $inner:expr, find) => {
        fn find(
            &$self,
            by: $crate::driver::Find<'_>,
        ) -> $crate::Result<Vec<$crate::driver::LockRecord>> {
            $crate::driver::Driver::find($inner, by)
        }
    };
    (@method $self:tt, $inner:expr, list_records) => {
        fn list_records(
            &$self,
            prefix: &$crate::driver::KeyPrefix,
            kind: $crate::driver::LeaseKind,
            limit: $crate::driver::ListLimit,
        ) -> $crate::Result<$crate::driver::LockList<$crate::driver::LockRecord>> {
            $crate::driver::Driver::list_records($inner, prefix, kind, limit)
        }
    };
    (@method $self:tt, $inner:expr, find_line) => {
        fn find_line(
            &$self,
            key: &$crate::driver::Key,
            kind: $crate::driver::LeaseKind,
        ) -> $crate::Result<Vec<$crate::driver::PlaceRecord>> {
            $crate::driver::Driver::find_line($inner, key, kind)
        }
    };
    (@method $self:tt, $inner:expr, leave_line) => {
        fn leave_line(
            &$self,
            key: &$crate::driver::Key,
            kind: $crate::driver::LeaseKind,
            place: &$crate::driver::LockId,
        ) -> $crate::Result<()> {
            $crate::driver::Driver::leave_line($inner, key, kind, place)
        }
    };
    (@method $self:tt, $inner:expr, break_leases) => {
        fn break_leases(
            &$self,
            order: &$crate::driver::BreakOrder<'_>,
        ) -> $crate::Result<$crate::driver::Broken> {
            $crate::driver::Driver::break_leases($inner, order)
        }
    };
    (@method $self:tt, $inner:expr, watch_releases) => {
        fn watch_releases(
            &$self,
            on_release: $crate::driver::OnRelease,
        ) -> $crate::Result<Option<Box<dyn $crate::driver::ReleaseWatch>>> {
            $crate::driver::Driver::watch_releases($inner, on_release)
        }
    };
}
