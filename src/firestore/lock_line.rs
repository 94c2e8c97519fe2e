//! A lock's line of waiters outside an acquisition: seen ([`Driver::find_line`]) and left
//! ([`Driver::leave_line`]). It is stored in the key's fence counter document (see
//! `line_doc.rs`); acquisitions read and write it in `acquire_once`.
//!
//! [`Driver::find_line`]: crate::driver::Driver::find_line
//! [`Driver::leave_line`]: crate::driver::Driver::leave_line

use serde_json::json;

use super::commit::{Attempt, OpResult, lock_error, with_retries};
use super::document::{counter_fields, document_id, fence_document_id_of, parse_counter};
use super::driver::FirestoreBackend;
use super::line_doc::parse_line;
use super::rest::Document;
use crate::driver::{Key, LockId, PlaceRecord, Places};
use crate::error::Result;
use crate::fence::Fence;

impl FirestoreBackend {
    /// The live places of the lock's line of `key`, in line order: one read.
    pub(super) fn lock_line(&self, key: &Key) -> Result<Vec<PlaceRecord>> {
        let (_, line) = self
            .read_lock_line(key)
            .map_err(|e| lock_error(&self.rest, e))?;
        Ok(line.live(self.now_ms()?))
    }

    /// Removes `place` from the lock's line of `key`: one read, and one commit of the counter
    /// document (conditioned on its `updateTime`, again after a lost race) if it was there.
    pub(super) fn leave_lock_line(&self, key: &Key, place: &LockId) -> Result<()> {
        with_retries(&self.rest, &self.aborted_retries, || {
            let (counter_doc, mut line) = self.read_lock_line(key)?;
            let Some(counter_doc) = counter_doc else {
                return Ok(Attempt::Done(()));
            };
            if !line.leave(place) {
                return Ok(Attempt::Done(()));
            }
            let counter = parse_counter(&counter_doc, key.as_str())?;
            let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key.as_str()))?;
            let write = json!({
                "update": {
                    "name": counter_doc.name(),
                    "fields": counter_fields(key.as_str(), fence, &line),
                },
                "currentDocument": { "updateTime": counter_doc.update_time() },
            });
            Ok(match self.rest.commit_versions(vec![write])? {
                Some(_) => Attempt::Done(()),
                None => Attempt::Conflict,
            })
        })
    }

    /// The fence counter document of `key` (if any) and the lock's line it holds.
    fn read_lock_line(&self, key: &Key) -> OpResult<(Option<Document>, Places)> {
        let id = fence_document_id_of(&document_id(key.as_str())?)?;
        let name = self.rest.document_name(&self.fence_collection, &id);
        let [counter_doc] = self.rest.batch_get([&name])?;
        let line = parse_line(counter_doc.as_ref(), key.as_str(), "fence counter")?;
        Ok((counter_doc, line))
    }
}
