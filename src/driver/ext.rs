//! What every driver can do through its eleven methods, written once: [`DriverExt`].

use super::acquire::{acquire, release_granted};
use super::lease::{Extension, LeaseRef, Outcome};
use super::request::{Acquisition, Acquisitions, Request};
use super::seam::Driver;
use crate::error::Result;
use crate::time::Ttl;

/// What every [`Driver`] can do through its eleven methods, written once: one key's answer as
/// a single [`Acquisition`], one lease's extension.
pub trait DriverExt: Driver {
    /// Asks for `request` — one key — the way the crate does ([`acquire`]), and answers its
    /// lease or the refusal. A store that grants other than one lease for it answers
    /// `Internal` (after giving back what it granted).
    fn acquire_one(&self, request: &Request<'_>) -> Result<Acquisition> {
        match acquire(self, request)? {
            Acquisitions::Acquired(mut leases) if leases.len() == 1 => {
                let (lease, version) = leases.swap_remove(0);
                Ok(Acquisition::Acquired { lease, version })
            }
            Acquisitions::Acquired(leases) => {
                let (key, kind) = (request.first_key(), request.mode.kind());
                for (lease, version) in &leases {
                    let _ = release_granted(self, key, kind, lease, version.as_ref());
                }
                Err(crate::error::LockError::internal(format!(
                    "the backend granted {} leases for {} keys",
                    leases.len(),
                    request.keys().len()
                ))
                .with_key(request.first_key().as_str()))
            }
            Acquisitions::Locked { .. } => Ok(Acquisition::Locked),
        }
    }

    /// Sets the expiry of the live lease `lease` names to *now + ttl*: a batch of one.
    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        self.extend_leases(&[(lease, ttl)])
            .pop()
            .unwrap_or_else(|| {
                Err(crate::error::LockError::internal(
                    "the backend answered no extension for the lease",
                ))
            })
    }
}

impl<D: Driver + ?Sized> DriverExt for D {}
