//! The locks of several keys at once ([`Driver::try_acquire`] with a set), all or none, in one read
//! and one commit: one `batchGet` of every key's lock document and fence counter document (the
//! line and the shared holders in it), the decision by [`admit_all`] (the rule of several
//! keys), and one `commit` of every write, each conditioned on its document being as read. So the set is taken at one instant, or
//! nothing is: a commit either applies every write or none, and fails whole when any document
//! changed since the read — the guarantee of a read-write transaction, without its document
//! locks (see the module docs). Each key is written as an acquisition of that key alone
//! writes it (`lock_take.rs`).
//!
//! [`Driver::try_acquire`]: crate::driver::Driver::try_acquire

use super::commit::{Attempt, OpResult, with_retries};
use super::document::version_of;
use super::driver::FirestoreBackend;
use super::lock_take::{LockNames, LockRead, live_lock, lost_race};
use crate::driver::{Acquisitions, Lease, LockId, Places, Request, admit_all};
use crate::error::Result;
use crate::fence::Fence;

impl FirestoreBackend {
    /// Takes the exclusive locks of every key of `request`, or none; see the module docs.
    pub(super) fn acquire_set(&self, request: &Request<'_>) -> Result<Acquisitions> {
        let names = (request.keys().iter())
            .map(|key| self.lock_names(key.as_str()))
            .collect::<Result<Vec<LockNames>>>()?;
        with_retries(&self.rest, &self.aborted_retries, || {
            self.acquire_set_once(request, &names)
        })
    }

    /// One attempt: granted, every lock document and counter document in one commit; refused,
    /// nothing unless a waiter's places changed, then those counter documents in one commit.
    /// A refused waiter is told its ticket and how many places stand ahead of it where it
    /// stands furthest back ([`admit_all`]).
    fn acquire_set_once(
        &self,
        request: &Request<'_>,
        names: &[LockNames],
    ) -> OpResult<Attempt<Acquisitions>> {
        let (keys, line, holder) = (request.keys(), request.line, request.holder);
        let asked: Vec<&str> = names.iter().flatten().map(String::as_str).collect();
        // One answer per name, in order (checked as it is decoded): two per key.
        let mut read = self.rest.batch_get_all(&asked)?.into_iter();
        let now = self.now_ms()?;
        let mut found = Vec::with_capacity(keys.len());
        for key in keys {
            let documents = [read.next().flatten(), read.next().flatten()];
            let held = live_lock(documents[0].as_ref(), key.as_str(), now)?;
            found.push((key.as_str(), documents, held));
        }
        // A key held, and no place to take: refused on this one read, as for one key.
        if line.place().is_none() && found.iter().any(|(.., held)| held.is_some()) {
            return Ok(Attempt::Done(Acquisitions::locked_at(None)));
        }
        let mut locks = found
            .into_iter()
            .zip(names)
            .map(|((key, documents, held), names)| {
                LockRead::new(key, names.clone(), documents, held, now)
            })
            .collect::<Result<Vec<LockRead<'_>>>>()?;
        let free: Vec<usize> = locks.iter().map(LockRead::free).collect();
        let mut lines: Vec<&mut Places> = locks.iter_mut().map(|l| &mut l.counter.line).collect();
        let admission = admit_all(&mut lines, &free, line, self.line_now_ms()?, holder);
        if !admission.granted {
            let refused = Acquisitions::Locked {
                ticket: admission.ticket,
                position: admission.position,
            };
            // A single attempt leaves expired places to the next write: it writes nothing.
            if line.place().is_none() {
                return Ok(Attempt::Done(refused));
            }
            // The waiter's places, taken or renewed, in the counter documents whose line
            // changed; none changed (every place fresh), nothing is written. Lost (no
            // answer): the next attempt finds its places (the same id) or takes them.
            let writes = locks
                .iter()
                .zip(&admission.changed)
                .filter(|(_, changed)| **changed)
                .map(|(lock, _)| lock.line_write())
                .collect::<Result<Vec<_>>>()?;
            if writes.is_empty() {
                return Ok(Attempt::Done(refused));
            }
            return Ok(match self.rest.commit_versions(writes)? {
                Some(_) => Attempt::Done(refused),
                // Another waiter or an acquirer wrote a counter: read again.
                None => Attempt::Conflict,
            });
        }
        // Every fence checked before the commit: a counter past the limit writes nothing.
        let fences = locks
            .iter()
            .map(LockRead::next_fence)
            .collect::<Result<Vec<Fence>>>()?;
        let lock_ids: Vec<String> = locks
            .iter()
            .map(|_| LockId::generate().into_string())
            .collect();
        let expires_at_ms = now.saturating_add(request.ttl.as_millis());
        let writes = locks
            .iter()
            .zip(&fences)
            .zip(&lock_ids)
            .flat_map(|((lock, fence), lock_id)| {
                lock.take(lock_id, *fence, now, expires_at_ms, holder)
            })
            .collect();
        let taken: Vec<(&str, &str)> = keys
            .iter()
            .map(|key| key.as_str())
            .zip(lock_ids.iter().map(String::as_str))
            .collect();
        // Lost (no answer): in doubt, with every key's lock id, for the caller to release.
        let Some(times) = self.commit_taking(writes, &taken)? else {
            // Some document changed since the read: an acquirer won a key, a waiter took or
            // renewed its place, a reader came.
            return Ok(lost_race(line, Acquisitions::locked_at(None)));
        };
        let leases = (lock_ids.into_iter().zip(fences).enumerate())
            .map(|(i, (lock_id, fence))| {
                // Two writes per key, the lock document's first: its time is the lease's
                // version.
                let version = times
                    .get(2 * i)
                    .and_then(Option::as_deref)
                    .map(|time| version_of(time, expires_at_ms));
                let lease = Lease {
                    lock_id,
                    fence,
                    expires_at_ms,
                };
                (lease, version)
            })
            .collect();
        Ok(Attempt::Done(Acquisitions::Acquired(leases)))
    }
}
