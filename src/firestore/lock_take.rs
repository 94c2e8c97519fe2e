//! One key's lock as an acquisition reads it — its lock document and its fence counter
//! document (the line and the shared holders in it) — and the writes that take it. One piece of
//! code for the acquisition of one key (`driver.rs`) and of a set of keys (`lock_set.rs`), so
//! that a lock taken with others is stored exactly as one taken alone, fields, fence and
//! preconditions alike.

use serde_json::{Value, json};

use super::commit::{Attempt, OpError, OpResult, unchanged_since};
use super::counter_doc::CounterDoc;
use super::document::{LockDoc, document_id, fence_document_id_of, version_of};
use super::driver::FirestoreBackend;
use super::rest::{Document, integer_value, string_value};
use crate::driver::{Acquisitions, Holder, Key, Line, LockId, Request, TIME_TOLERANCE_MS, is_live};
use crate::error::Result;
use crate::fence::Fence;

/// The full names of a key's lock document and fence counter document, in that order.
pub(super) type LockNames = [String; 2];

/// The live lock of a lock document as read at `now_ms`: `None` when there is no document or
/// its lock has expired; a document that is not a SyncGuard lock is `Internal`, naming `key`.
pub(super) fn live_lock(
    document: Option<&Document>,
    key: &str,
    now_ms: i64,
) -> Result<Option<LockDoc>> {
    let Some(document) = document else {
        return Ok(None);
    };
    let lock = LockDoc::parse(document, Some(key))?;
    Ok(is_live(lock.expires_at_ms, now_ms, TIME_TOLERANCE_MS).then_some(lock))
}

/// What a commit that lost a race answers: a waiter reads again, so that it keeps its place
/// (or is granted); a single attempt is `refused`, as a lost race always was.
pub(super) fn lost_race<T>(line: Line<'_>, refused: T) -> Attempt<T> {
    match line {
        Line::Wait(_) | Line::WaitAt(..) => Attempt::Conflict,
        Line::Keep | Line::Ignore => Attempt::Done(refused),
    }
}

/// A key's lock and fence counter documents as an acquisition read them.
pub(super) struct LockRead<'k> {
    key: &'k str,
    lock_name: String,
    /// The lock document as read, for the precondition.
    lock_doc: Option<Document>,
    /// Its lock, when live.
    held: Option<LockDoc>,
    /// The counter document, its expired shared holders already dropped.
    pub(super) counter: CounterDoc,
}

impl<'k> LockRead<'k> {
    /// The documents `[lock, counter]` read for `key` at `now_ms` (under `names`), `held` the
    /// lock document's live lock ([`live_lock`]). Expired shared holders never count and go
    /// with the commit, if there is one.
    pub(super) fn new(
        key: &'k str,
        [lock_name, counter_name]: LockNames,
        [lock_doc, counter_read]: [Option<Document>; 2],
        held: Option<LockDoc>,
        now_ms: i64,
    ) -> Result<LockRead<'k>> {
        let mut counter = CounterDoc::parse(counter_name, counter_read, key)?;
        counter.reclaim(now_ms);
        Ok(LockRead {
            key,
            lock_name,
            lock_doc,
            held,
            counter,
        })
    }

    /// The lock's free slots: 1 when no live lock and no live shared holder, else 0. A reader
    /// that comes in after the read changes the counter document, so the commit fails.
    pub(super) fn free(&self) -> usize {
        usize::from(self.held.is_none() && self.counter.readers.is_empty())
    }

    /// The write of the counter document alone, with the line as it is now (a waiter's place
    /// taken or renewed), at the fence it had.
    pub(super) fn line_write(&self) -> Result<Value> {
        self.counter.place_write(self.key, self.held.as_ref())
    }

    /// The fence the lock gets if taken: checked before the commit, so that a counter past
    /// the limit writes nothing.
    pub(super) fn next_fence(&self) -> Result<Fence> {
        Fence::from_counter(self.counter.counter + 1).map_err(|e| e.with_key(self.key))
    }

    /// The writes that take the lock under `lock_id` with `fence` (from
    /// [`next_fence`](LockRead::next_fence)) at `now_ms` until `expires_at_ms`: the lock
    /// document, then the counter document (with the line as it is now), each applied only if
    /// unchanged since read.
    pub(super) fn take(
        &self,
        lock_id: &str,
        fence: Fence,
        now_ms: i64,
        expires_at_ms: i64,
        holder: Option<&Holder>,
    ) -> [Value; 2] {
        let mut lock_fields = json!({
            "lockId": string_value(lock_id),
            "expiresAtMs": integer_value(expires_at_ms),
            "acquiredAtMs": integer_value(now_ms),
            "key": string_value(self.key),
            "fence": string_value(&fence.to_string()),
        });
        if let Some(holder) = holder {
            // An extra field: the TypeScript SyncGuard's renewals keep it (they update
            // `expiresAtMs` only), its reads ignore it, and its acquisitions replace the whole
            // document, so a description never outlives its lock.
            lock_fields["holder"] = string_value(holder.as_str());
        }
        [
            json!({
                "update": { "name": self.lock_name, "fields": lock_fields },
                "currentDocument": unchanged_since(self.lock_doc.as_ref()),
            }),
            self.counter.write(self.key, fence),
        ]
    }
}

impl FirestoreBackend {
    /// One attempt at the lock on `key` for `request`, heeding its line (stored in the fence
    /// counter document, read in the same `batchGet`): granted, the lock and the counter (with
    /// the line as [`Places::admit`](crate::driver::Places::admit) left it) in one commit;
    /// refused, nothing more unless a waiter's place was taken or renewed, then the counter
    /// document alone. A refused waiter is told how many places stand ahead of its own.
    pub(super) fn acquire_once(
        &self,
        key: &Key,
        request: &Request<'_>,
    ) -> OpResult<Attempt<Acquisitions>> {
        let (user_key, line, holder) = (key.as_str(), request.line, request.holder);
        let names = self.lock_names(user_key)?;
        let [lock_name, counter_name] = &names;
        let read = self.rest.batch_get([lock_name, counter_name])?;
        let now = self.now_ms()?;
        let held = live_lock(read[0].as_ref(), user_key, now)?;
        // Held, and no place to take: refused on this one read, as ever.
        if held.is_some() && line.place().is_none() {
            return Ok(Attempt::Done(Acquisitions::locked_at(None)));
        }
        let mut lock = LockRead::new(user_key, names, read, held, now)?;
        let admission =
            lock.counter
                .line
                .admit(line, lock.free(), false, self.line_now_ms()?, holder);
        if !admission.granted {
            let refused = Acquisitions::locked_at(admission.position);
            // A single attempt leaves expired places to the next write: it writes nothing;
            // nor does a waiter whose place is fresh (`Places::stand`), so that it writes its
            // place about once per `PLACE_RENEWAL`, not at every wake-up.
            if line.place().is_none() || !admission.changed {
                return Ok(Attempt::Done(refused));
            }
            // Lost (no answer): the waiter's next attempt finds its place (the same id) or
            // takes it, one place either way, and nothing else was written.
            return Ok(match self.rest.commit_versions(vec![lock.line_write()?])? {
                Some(_) => Attempt::Done(refused),
                // Another waiter or an acquirer wrote the counter: read again.
                None => Attempt::Conflict,
            });
        }
        let fence = lock.next_fence()?;
        let lock_id = LockId::generate().into_string();
        let expires_at_ms = now.saturating_add(request.ttl.as_millis());
        let writes = lock.take(&lock_id, fence, now, expires_at_ms, holder);
        // Lost (no answer): in doubt, with the lock id, for the caller to release.
        let Some(times) = self.commit_taking(writes.into(), &[(user_key, &lock_id)])? else {
            // Someone changed the lock or the counter since the read: another acquirer won,
            // or a waiter took or renewed its place.
            return Ok(lost_race(line, Acquisitions::locked_at(None)));
        };
        Ok(Attempt::Done(Acquisitions::granted(
            lock_id,
            fence,
            expires_at_ms,
            times
                .first()
                .and_then(Option::as_deref)
                .map(|time| version_of(time, expires_at_ms)),
        )))
    }

    /// The names of the lock document and fence counter document of `key`.
    pub(super) fn lock_names(&self, key: &str) -> Result<LockNames> {
        let lock_doc_id = document_id(key)?;
        Ok([
            self.rest.document_name(&self.collection, &lock_doc_id),
            self.rest
                .document_name(&self.fence_collection, &fence_document_id_of(&lock_doc_id)?),
        ])
    }

    /// Commits `writes`, which take the locks `taken` (key, lock id): each write's new
    /// `updateTime`, or `None` when a document changed since it was read. A commit that may
    /// have been applied although no answer says so is an error in doubt of every lease of
    /// `taken`: the caller gets the lock ids it would hold, to release them (the Locker does,
    /// in the background).
    pub(super) fn commit_taking(
        &self,
        writes: Vec<Value>,
        taken: &[(&str, &str)],
    ) -> OpResult<Option<Vec<Option<String>>>> {
        match self.rest.commit_versions(writes) {
            Err(error) if !error.is_aborted() && error.may_have_been_applied() => {
                let leases = taken
                    .iter()
                    .map(|(key, lock_id)| ((*key).to_owned(), (*lock_id).to_owned()));
                Err(OpError::Lock(
                    self.rest.lock_error(error).in_doubt_all(leases),
                ))
            }
            committed => Ok(committed?),
        }
    }
}
