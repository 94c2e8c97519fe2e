//! The Firestore backend itself: [`FirestoreBackend`], its operations as reads and
//! compare-and-set commits, and its [`Driver`] implementation.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde_json::{Value, json};

use super::combiner::Combiner;
use super::commit::{Attempt, OpResult, extension_write, lock_error, with_retries};
use super::document::{LockDoc, document_id, fence_document_id_of, parse_version, version_of};
use super::rest::{Document, RestClient, RestError, string_value};
use super::semaphore_change::PermitChange;
use super::semaphore_change::Slots;
use super::semaphore_change::mismatched;
use super::skew::ClockSkew;
use crate::driver::{
    Acquisitions, BreakOrder, Broken, Driver, Extension, Find, Holder, Key, KeyPrefix, LeaseKind,
    LeaseRef, ListLimit, LockId, LockList, LockRecord, Mode, Outcome, PlaceRecord, Request,
    TIME_TOLERANCE_MS, Ttl, Version, hash_key, is_live,
};
use crate::driver::{Capabilities, TimeAuthority, acquire_one_by_one, extend_by_kind};
use crate::error::{ErrorCode, LockError, Result};
use crate::time::Clock;

/// Skew the client clock is assumed to stay within (the specification's ±2 s).
pub const ASSUMED_SKEW_MS: i64 = 2000;
/// How long past expiry (beyond [`ASSUMED_SKEW_MS`]) the opt-in cleanup in `is_locked` waits.
pub const CLEANUP_GUARD_MS: i64 = 1000;
/// The most writes one `batchWrite` request may carry.
const BATCH_WRITE_LIMIT: usize = 500;

/// A listing's answer ([`Driver::list_records`]).
type Listing = LockList<LockRecord>;

/// Counters of what the backend sent, for monitoring and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct FirestoreStats {
    /// HTTP requests to Firestore (token requests not included).
    pub requests: u64,
    /// Commits retried after Firestore answered ABORTED (they met a transaction).
    pub aborted_retries: u64,
}

/// Distributed locks in Firestore. See the [module docs](super).
pub struct FirestoreBackend {
    pub(super) rest: RestClient,
    pub(super) project: String,
    pub(super) database: String,
    pub(super) collection: String,
    pub(super) fence_collection: String,
    /// Where semaphores are kept: `<collection>_semaphores` (see `semaphore.rs`).
    pub(super) semaphore_collection: String,
    pub(super) cleanup_in_is_locked: bool,
    pub(super) max_clock_skew: Option<Duration>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) aborted_retries: AtomicU64,
    /// The documents of permit-like leases being written (semaphores' documents, and fence
    /// counter documents for their shared holders), whose changes meet in one commit.
    pub(super) holders: Combiner<PermitChange>,
}

impl FirestoreBackend {
    /// The latest estimate of this machine's clock offset from Firestore's (`None` before the
    /// first answer).
    pub fn clock_skew(&self) -> Option<ClockSkew> {
        self.rest.skew.latest()
    }

    /// What the backend has sent so far.
    pub fn stats(&self) -> FirestoreStats {
        FirestoreStats {
            requests: self.rest.requests(),
            aborted_retries: self.aborted_retries.load(Ordering::Relaxed),
        }
    }

    /// The lock document id of a user key.
    pub fn lock_document_id(&self, key: &str) -> Result<String> {
        document_id(Key::new(key)?.as_str())
    }

    /// The fence counter document id of a user key.
    pub fn fence_document_id(&self, key: &str) -> Result<String> {
        fence_document_id_of(&self.lock_document_id(key)?)
    }

    /// Now, by the client clock, unless the clock is known to be too far off.
    pub(super) fn now_ms(&self) -> Result<i64> {
        self.check_skew()?;
        Ok(self.clock.now_ms())
    }

    /// Now for the line of waiters: Firestore's time (`skew.rs`), read off the answer to the
    /// request just made and the monotonic clock, so that places are taken and judged by one
    /// clock for every client, however far off their own clocks are. The client clock only
    /// before Firestore has answered with a time (never, after the read every decision on the
    /// line follows).
    pub(super) fn line_now_ms(&self) -> Result<i64> {
        self.check_skew()?;
        Ok(self
            .rest
            .skew
            .server_now_ms()
            .unwrap_or_else(|| self.clock.now_ms()))
    }

    /// Fails while the measured clock skew is certainly beyond `max_clock_skew`. Every
    /// operation checks before it starts (and again when it reads the clock).
    pub(super) fn check_skew(&self) -> Result<()> {
        if let (Some(bound), Some(skew)) = (self.max_clock_skew, self.rest.skew.latest())
            && skew.at_least() > bound
        {
            return Err(LockError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "this machine's clock is off Firestore's by {} ms (±{} ms), beyond \
                     max_clock_skew {bound:?}: synchronise it (NTP)",
                    skew.offset_ms, skew.uncertainty_ms
                ),
            ));
        }
        Ok(())
    }

    /// The query for a lock id (no limit: a second match must be seen, not hidden).
    fn lock_id_query(&self, lock_id: &str) -> Value {
        json!({
            "from": [{ "collectionId": self.collection }],
            "where": { "fieldFilter": {
                "field": { "fieldPath": "lockId" },
                "op": "EQUAL",
                "value": string_value(lock_id),
            }},
        })
    }

    /// The documents a query for `lock_id` finds.
    fn documents_with_lock_id(&self, lock_id: &str) -> Result<Vec<Document>, RestError> {
        self.rest.run_query(self.lock_id_query(lock_id))
    }

    /// The one document holding `lock_id`, checked; `Ok(None)` when none; two or more are an
    /// inconsistency, reported and treated as absent (nothing is touched).
    fn single_match(&self, documents: &[Document], lock_id: &str) -> Result<Option<LockDoc>> {
        match documents {
            [] => Ok(None),
            [document] => {
                let lock = LockDoc::parse(document, None)?;
                // Defence in depth: the query said so, the document must too; an answer that
                // contradicts its query is not "no lock".
                if lock.lock_id != lock_id {
                    return Err(self.rest.lock_error(RestError::bad_answer(
                        "runQuery",
                        "the document found does not hold the lock id asked for",
                    )));
                }
                Ok(Some(lock))
            }
            _ => {
                log::warn!(
                    "syncguard: {} Firestore lock documents carry the same lock id (hash {}); \
                     leaving them alone",
                    documents.len(),
                    hash_key(lock_id)
                );
                Ok(None)
            }
        }
    }

    /// Release (`ttl_ms == None`) or extend (and, with `holder`, replace the holder text): the
    /// lock found by its id, changed only if it is still exactly as read.
    fn mutate_once(
        &self,
        lock_id: &str,
        ttl_ms: Option<i64>,
        holder: Option<&Holder>,
    ) -> OpResult<Attempt<(Outcome<i64>, Option<Version>)>> {
        let documents = self.documents_with_lock_id(lock_id)?;
        let Some(lock) = self
            .single_match(&documents, lock_id)
            .map_err(|e| e.with_lock_id(lock_id))?
        else {
            return Ok(Attempt::Done((Outcome::NotFound, None)));
        };
        let now = self.now_ms()?;
        let unchanged = json!({ "updateTime": lock.update_time });
        let delete = json!({ "delete": lock.name, "currentDocument": unchanged });
        let (write, outcome) = if !is_live(lock.expires_at_ms, now, TIME_TOLERANCE_MS) {
            // Expired: remove it (it is this lock id's), never revive it.
            (delete, Outcome::Expired)
        } else if let Some(ttl_ms) = ttl_ms {
            let expires_at_ms = now.saturating_add(ttl_ms);
            let update = extension_write(&lock.name, expires_at_ms, holder, &lock.update_time);
            (update, Outcome::Applied(expires_at_ms))
        } else {
            (delete, Outcome::Applied(lock.expires_at_ms))
        };
        Ok(match self.rest.commit_versions(vec![write])? {
            Some(times) => {
                let version = match (outcome, ttl_ms) {
                    (Outcome::Applied(expires_at_ms), Some(_)) => times
                        .first()
                        .and_then(Option::as_deref)
                        .map(|time| version_of(time, expires_at_ms)),
                    _ => None,
                };
                Attempt::Done((outcome, version))
            }
            None => Attempt::Conflict,
        })
    }

    /// The lease's lock document, its update time and its expiry, when the holder knows its
    /// version and the lock is live by this machine's clock: then a renewal or release is one
    /// write with that version as precondition. `None` sends the caller the long way (find it
    /// by lock id).
    fn known(&self, lease: LeaseRef<'_>) -> Result<Option<(String, String, i64)>> {
        let (Some(key), Some(version)) = (lease.key, lease.version) else {
            return Ok(None);
        };
        let Some((expires_at_ms, update_time)) = parse_version(version) else {
            return Ok(None);
        };
        if !is_live(expires_at_ms, self.now_ms()?, TIME_TOLERANCE_MS) {
            return Ok(None);
        }
        let name = self
            .rest
            .document_name(&self.collection, &document_id(key.as_str())?);
        Ok(Some((name, update_time.to_owned(), expires_at_ms)))
    }

    /// A renewal the long way: the lock found by its id, changed if unchanged since read.
    fn extend_by_lock_id(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let lock_id = lease.lock_id.as_str();
        let (outcome, version) = with_retries(&self.rest, &self.aborted_retries, || {
            self.mutate_once(lock_id, Some(ttl.as_millis()), lease.holder)
        })?;
        Ok(match outcome {
            Outcome::Applied(expires_at_ms) => Outcome::Applied(Extension {
                expires_at_ms,
                version,
            }),
            Outcome::NotFound => Outcome::NotFound,
            Outcome::Expired => Outcome::Expired,
            Outcome::NotOwner => Outcome::NotOwner,
        })
    }

    /// [`Driver::extend_leases`] for locks only (a guard's renewal is a batch of one). A lease
    /// named with a holder text has it stored by the same write (`extension_write`).
    fn extend_lock_leases(
        &self,
        leases: &[(LeaseRef<'_>, Ttl)],
    ) -> Vec<Result<Outcome<Extension>>> {
        // Leases whose version is known go out as one batch write (each applied on its own,
        // with its own precondition); the rest, and those whose document changed, the long way.
        let mut answers: Vec<Option<Result<Outcome<Extension>>>> =
            leases.iter().map(|_| None).collect();
        let mut batch = Vec::new();
        for (i, (lease, ttl)) in leases.iter().enumerate() {
            match self.known(*lease) {
                Ok(Some((name, update_time, _))) => {
                    batch.push((i, name, update_time, *ttl, lease.holder));
                }
                Ok(None) => {}
                Err(error) => answers[i] = Some(Err(error)),
            }
        }
        for chunk in batch.chunks(BATCH_WRITE_LIMIT) {
            let now = match self.now_ms() {
                Ok(now) => now,
                Err(error) => {
                    for (i, ..) in chunk {
                        answers[*i] = Some(Err(LockError::new(error.code(), error.message())));
                    }
                    continue;
                }
            };
            let expiries: Vec<i64> = chunk
                .iter()
                .map(|(_, _, _, ttl, _)| now.saturating_add(ttl.as_millis()))
                .collect();
            let writes = chunk
                .iter()
                .zip(&expiries)
                .map(|((_, name, update_time, _, holder), expires_at_ms)| {
                    extension_write(name, *expires_at_ms, *holder, update_time)
                })
                .collect();
            match self.rest.batch_write(writes) {
                Ok(results) => {
                    for (((i, ..), expires_at_ms), result) in
                        chunk.iter().zip(&expiries).zip(results)
                    {
                        answers[*i] = match result {
                            Ok(time) => Some(Ok(Outcome::Applied(Extension {
                                expires_at_ms: *expires_at_ms,
                                version: Some(version_of(&time, *expires_at_ms)),
                            }))),
                            Err(error) if error.is_precondition_failure() || error.is_aborted() => {
                                None
                            }
                            Err(error) => Some(Err(self.rest.lock_error(error))),
                        };
                    }
                }
                Err(error) => {
                    let error = self.rest.lock_error(error);
                    for (i, ..) in chunk {
                        answers[*i] = Some(Err(LockError::new(error.code(), error.message())));
                    }
                }
            }
        }
        answers
            .into_iter()
            .zip(leases)
            .map(|(answer, (lease, ttl))| {
                answer.unwrap_or_else(|| self.extend_by_lock_id(*lease, *ttl))
            })
            .collect()
    }

    /// The lock document for `key`, read without a transaction.
    fn read_lock(&self, key: &Key) -> OpResult<Option<LockDoc>> {
        let name = self
            .rest
            .document_name(&self.collection, &document_id(key.as_str())?);
        let [document] = self.rest.batch_get([&name])?;
        match document {
            None => Ok(None),
            Some(doc) => Ok(Some(LockDoc::parse(&doc, Some(key.as_str()))?)),
        }
    }
}

impl Driver for FirestoreBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("firestore", true, TimeAuthority::Client).with_every_mode()
    }

    /// One key's lock: `acquire_once` (`lock_take.rs`); several keys' locks: one read and one
    /// commit (`lock_set.rs`); a permit or a shared hold: a change to the document they are
    /// kept in (`held.rs`).
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        self.check_skew()?;
        let Some(key) = request.key() else {
            if request.mode != Mode::Exclusive {
                return acquire_one_by_one(self, request);
            }
            return self.acquire_set(request);
        };
        match request.mode {
            Mode::Exclusive => with_retries(&self.rest, &self.aborted_retries, || {
                self.acquire_once(key, request)
            }),
            Mode::Shared => self.take_held(key, Slots::Shared, request),
            Mode::Permit(permits) => self.take_held(key, Slots::Permit(permits), request),
        }
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        self.check_skew()?;
        if lease.kind != LeaseKind::Lock {
            return self.give_back_held(lease);
        }
        // The expiry of the lock a delete without an answer may have removed.
        let mut maybe_removed_live_until = None;
        if let Some((name, update_time, expires_at_ms)) = self.known(lease)? {
            let delete = json!({
                "delete": name,
                "currentDocument": { "updateTime": update_time },
            });
            match self.rest.commit_versions(vec![delete]) {
                // Unchanged since this holder's last write, and live by `known`.
                Ok(Some(_)) => return Ok(Outcome::Applied(())),
                // Changed (or a transaction in the way): the long way decides.
                Ok(None) => {}
                Err(error) if error.is_aborted() => {}
                // No usable answer: the delete may or may not have happened. The long way
                // reads again and decides, so that a hiccup does not leave the lock to block
                // everyone until it expires (if this delete did happen, it answers "gone").
                Err(error) if error.is_worth_retrying_now() => {
                    if error.may_have_been_applied() {
                        maybe_removed_live_until = Some(expires_at_ms);
                    }
                    let error = self.rest.lock_error(error);
                    log::debug!("syncguard: Firestore release retried by lock id: {error}");
                }
                Err(error) => return Err(self.rest.lock_error(error)),
            }
        }
        let lock_id = lease.lock_id.as_str();
        let (outcome, _) = with_retries(&self.rest, &self.aborted_retries, || {
            self.mutate_once(lock_id, None, None)
        })?;
        Ok(match outcome {
            Outcome::Applied(_) => Outcome::Applied(()),
            // Gone while it would still be live: only this release's own delete, whose answer
            // was lost, removes a live lock (a permit's release judges the same way).
            Outcome::NotFound
                if maybe_removed_live_until.is_some_and(|until| {
                    self.now_ms()
                        .is_ok_and(|now| is_live(until, now, TIME_TOLERANCE_MS))
                }) =>
            {
                Outcome::Applied(())
            }
            Outcome::NotFound => Outcome::NotFound,
            Outcome::Expired => Outcome::Expired,
            Outcome::NotOwner => Outcome::NotOwner,
        })
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        if let Err(error) = self.check_skew() {
            return leases
                .iter()
                .map(|_| Err(LockError::new(error.code(), error.message())))
                .collect();
        }
        // The locks as one batch write, the permits and shared holds one commit per document.
        extend_by_kind(leases, |kind, batch| match kind {
            LeaseKind::Lock => self.extend_lock_leases(batch),
            LeaseKind::Permit | LeaseKind::Shared
                if batch.iter().any(|(lease, _)| lease.holder.is_some()) =>
            {
                // A caller's mistake, never the heartbeat's: each lease on its own.
                (batch.iter())
                    .map(|&(lease, ttl)| match lease.holder {
                        Some(_) => Err(LockError::invalid_argument(
                            "only a lock's holder text can be replaced",
                        )),
                        None => (self.renew_held_leases(kind, &[(lease, ttl)]).pop())
                            .unwrap_or_else(|| Err(mismatched(None))),
                    })
                    .collect()
            }
            LeaseKind::Permit | LeaseKind::Shared => self.renew_held_leases(kind, batch),
        })
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        self.check_skew()?;
        let Some(lock) = self.read_lock(key).map_err(|e| lock_error(&self.rest, e))? else {
            return Ok(false);
        };
        let now = self.now_ms()?;
        let live = is_live(lock.expires_at_ms, now, TIME_TOLERANCE_MS);
        if !live
            && self.cleanup_in_is_locked
            && now - lock.expires_at_ms > ASSUMED_SKEW_MS + CLEANUP_GUARD_MS
        {
            // Only if nobody changed it since it was read; best effort, outcome ignored.
            let delete = json!({
                "delete": lock.name,
                "currentDocument": { "updateTime": lock.update_time },
            });
            if let Err(error) = self.rest.commit(vec![delete]) {
                let error = self.rest.lock_error(error);
                log::debug!("syncguard: Firestore cleanup skipped: {error}");
            }
        }
        Ok(live)
    }

    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        self.check_skew()?;
        let lock = match by {
            Find::Key(key, LeaseKind::Lock) => {
                self.read_lock(key).map_err(|e| lock_error(&self.rest, e))?
            }
            Find::Key(key, kind) => return self.held_of(key, kind),
            Find::LockId(lock_id) => {
                let documents = self
                    .documents_with_lock_id(lock_id.as_str())
                    .map_err(|e| self.rest.lock_error(e))?;
                self.single_match(&documents, lock_id.as_str())?
            }
        };
        let Some(lock) = lock else {
            return Ok(Vec::new());
        };
        if !is_live(lock.expires_at_ms, self.now_ms()?, TIME_TOLERANCE_MS) {
            return Ok(Vec::new());
        }
        Ok(vec![lock.record()])
    }

    fn list_records(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
    ) -> Result<Listing> {
        match kind {
            LeaseKind::Lock => self.list(prefix, limit),
            LeaseKind::Permit | LeaseKind::Shared => self.held_under(prefix, kind, limit),
        }
    }

    fn find_line(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        self.check_skew()?;
        match kind {
            LeaseKind::Lock | LeaseKind::Shared => self.lock_line(key),
            LeaseKind::Permit => self.permit_line(key),
        }
    }

    fn leave_line(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        self.check_skew()?;
        match kind {
            LeaseKind::Lock | LeaseKind::Shared => self.leave_lock_line(key, place),
            LeaseKind::Permit => self.leave_permit_line(key, place),
        }
    }

    /// A lock: one read of its two documents and one commit; permits or shared holds: a
    /// change to the document they are kept in, as `holders.rs` makes every change to it (see
    /// `breaking.rs`). Nothing is announced: Firestore has no release watch, its waiters poll.
    fn break_leases(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        self.check_skew()?;
        match order.kind {
            LeaseKind::Lock => self.break_lock(order),
            LeaseKind::Permit | LeaseKind::Shared => self.break_held(order),
        }
    }
}

impl fmt::Debug for FirestoreBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FirestoreBackend")
            .field("project", &self.project)
            .field("database", &self.database)
            .field("collection", &self.collection)
            .field("fence_collection", &self.fence_collection)
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("max_clock_skew", &self.max_clock_skew)
            .field("clock_skew", &self.clock_skew())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}
