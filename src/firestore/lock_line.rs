//! A lock's line of waiters outside an acquisition: seen ([`Driver::find_line`]) and left
//! ([`Driver::leave_line`]). It is stored in the key's fence counter document (see
//! `line_doc.rs`); acquisitions read and write it in `acquire_once`.
//!
//! [`Driver::find_line`]: crate::driver::Driver::find_line
//! [`Driver::leave_line`]: crate::driver::Driver::leave_line

use super::commit::{Attempt, OpResult, lock_error, with_retries};
use super::counter_doc::CounterDoc;
use super::driver::FirestoreBackend;
use crate::driver::{Key, LockId, PlaceRecord};
use crate::error::Result;
use crate::fence::Fence;

impl FirestoreBackend {
    /// The live places of the lock's line of `key`, in line order: one read.
    pub(super) fn lock_line(&self, key: &Key) -> Result<Vec<PlaceRecord>> {
        let counter_doc = self
            .read_counter_doc(key)
            .map_err(|e| lock_error(&self.rest, e))?;
        Ok(counter_doc.line.live(self.line_now_ms()?))
    }

    /// Removes `place` from the lock's line of `key`: one read, and one commit of the counter
    /// document (conditioned on its `updateTime`, again after a lost race) if it was there.
    pub(super) fn leave_lock_line(&self, key: &Key, place: &LockId) -> Result<()> {
        with_retries(&self.rest, &self.aborted_retries, || {
            let mut counter_doc = self.read_counter_doc(key)?;
            if counter_doc.read.is_none() || !counter_doc.line.leave(place) {
                return Ok(Attempt::Done(()));
            }
            let fence =
                Fence::from_counter(counter_doc.counter).map_err(|e| e.with_key(key.as_str()))?;
            let write = counter_doc.write(key.as_str(), fence);
            Ok(match self.rest.commit_versions(vec![write])? {
                Some(_) => Attempt::Done(()),
                None => Attempt::Conflict,
            })
        })
    }

    /// The fence counter document of `key` (the lock's line and readers in it), one read.
    pub(super) fn read_counter_doc(&self, key: &Key) -> OpResult<CounterDoc> {
        let name = self.counter_doc_name(key)?;
        let [read] = self.rest.batch_get([&name])?;
        Ok(CounterDoc::parse(name, read, key.as_str())?)
    }

    /// The full name of the fence counter document of `key`.
    pub(super) fn counter_doc_name(&self, key: &Key) -> Result<String> {
        let [_, counter_name] = self.lock_names(key.as_str())?;
        Ok(counter_name)
    }
}
