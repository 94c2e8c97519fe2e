//! Listing the locks under a key prefix ([`Driver::list_records`](crate::driver::Driver::list_records)):
//! `runQuery` on the lock collection by a range of the `key` field, in pages; and the permits
//! of the semaphores under one ([`LeaseKind::Permit`](crate::driver::LeaseKind::Permit)), the
//! same way on the semaphore collection, or the shared holders of the locks under one
//! ([`LeaseKind::Shared`](crate::driver::LeaseKind::Shared)) on the fence counter collection by
//! its `keyDebug` field (`held.rs`).
//!
//! The query asks for `key >= prefix` and `key <` the least string above every key that starts
//! with the prefix ([`KeyPrefix::upper_bound`]), ordered by `key` (Firestore orders strings by
//! their UTF-8 bytes, the order every backend lists in): Firestore's automatic single-field
//! index on `key` serves it, no composite index is needed. Liveness is decided here, by the
//! client clock (a second range, on `expiresAtMs`, would need a composite index), so expired
//! documents take room in a page; pages of `limit + 1` documents follow one another (each
//! starting after the last document of the one before) until `limit + 1` live locks are found
//! or the range ends — at most [`MAX_LIST_PAGES`] pages, so one listing reads at most
//! `MAX_LIST_PAGES × (limit + 1)` documents. When the pages run out first, the list holds the live
//! locks of the keys read, which are the first keys under the prefix, and says so
//! ([`Coverage::WorkBoundReached`]). A document in the range that is not a SyncGuard lock record
//! is an `Internal` error naming its key, as in every other operation.
//!
//! Permits: the pages hold semaphore documents, each read whole and turned into its live
//! permits in fence order (a semaphore is never deleted, so one without live permits takes
//! room in a page, as an expired lock does), until more than `limit` permits are found, the
//! range ends, or [`MAX_LIST_PAGES`] pages were read. A document in the range that is not a
//! SyncGuard semaphore is an `Internal` error naming its key.

use serde_json::{Value, json};

use super::document::LockDoc;
use super::driver::FirestoreBackend;
use super::rest::{Document, string_value};
use crate::driver::{
    Coverage, KeyPrefix, ListLimit, LockList, LockRecord, TIME_TOLERANCE_MS, is_live,
};
use crate::error::Result;

/// The most pages (`runQuery` requests) one listing reads.
pub const MAX_LIST_PAGES: usize = 10;

/// One document of a listed collection, as read: its user key (its `key` field) and its live
/// records at the time given, in fence order (none, for an expired lock or a semaphore
/// without live permits).
type Listed = (String, Vec<LockRecord>);

impl FirestoreBackend {
    /// The live locks under `prefix`; see the module docs.
    pub(super) fn list(
        &self,
        prefix: &KeyPrefix,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        self.list_range(&self.collection, "key", prefix, limit, |document, now| {
            let lock = LockDoc::parse(document, None)?;
            let key = lock.key.clone();
            let live = is_live(lock.expires_at_ms, now, TIME_TOLERANCE_MS);
            Ok((
                key,
                if live {
                    vec![lock.record()]
                } else {
                    Vec::new()
                },
            ))
        })
    }

    /// The live records under `prefix` of the documents of `collection` (whose key is in the
    /// field `key_field`), each turned into its key and live records by `listed` (given the client clock's time): pages of `limit + 1`
    /// documents in `key` order, until more than `limit` records are found (the list is cut
    /// at `limit`: [`Coverage::LimitReached`]), the range ends ([`Coverage::Complete`]) or
    /// [`MAX_LIST_PAGES`] pages were read ([`Coverage::WorkBoundReached`]).
    pub(super) fn list_range(
        &self,
        collection: &str,
        key_field: &str,
        prefix: &KeyPrefix,
        limit: ListLimit,
        listed: impl Fn(&Document, i64) -> Result<Listed>,
    ) -> Result<LockList<LockRecord>> {
        self.check_skew()?;
        let page_size = limit.get() + 1;
        let mut found = Vec::new();
        // The `key` and the name of the last document read.
        let mut after: Option<(String, String)> = None;
        for _ in 0..MAX_LIST_PAGES {
            let query = self.range_query(collection, key_field, prefix, page_size, after.as_ref());
            let documents = self
                .rest
                .run_query(query)
                .map_err(|e| self.rest.lock_error(e))?;
            let now = self.now_ms()?;
            let last_page = documents.len() < page_size;
            for document in &documents {
                let (key, records) = listed(document, now)?;
                // The range says so already; a document that contradicts its query is not
                // listed.
                if prefix.matches(&key) {
                    found.extend(records);
                }
                // A document's records are taken whole (a semaphore's permits share its key,
                // in fence order), so the first `limit` of them are the first under the prefix.
                if found.len() > limit.get() {
                    return Ok(LockList::from_sorted(found, limit));
                }
                after = Some((key, document.name().to_owned()));
            }
            if last_page {
                return Ok(LockList::from_sorted(found, limit));
            }
        }
        Ok(LockList {
            locks: found,
            coverage: Coverage::WorkBoundReached,
        })
    }

    /// The `structuredQuery` for a page of `page_size` documents of `collection` whose
    /// `key_field` is under `prefix`, after the document `after` (its `key` and name).
    fn range_query(
        &self,
        collection: &str,
        key_field: &str,
        prefix: &KeyPrefix,
        page_size: usize,
        after: Option<&(String, String)>,
    ) -> Value {
        let range = |op: &str, bound: &str| {
            json!({ "fieldFilter": {
                "field": { "fieldPath": key_field },
                "op": op,
                "value": string_value(bound),
            }})
        };
        let mut filters = vec![range("GREATER_THAN_OR_EQUAL", prefix.as_str())];
        if let Some(upper) = prefix.upper_bound() {
            filters.push(range("LESS_THAN", &upper));
        }
        let mut query = json!({
            "from": [{ "collectionId": collection }],
            "where": { "compositeFilter": { "op": "AND", "filters": filters } },
            "orderBy": [
                { "field": { "fieldPath": key_field }, "direction": "ASCENDING" },
                { "field": { "fieldPath": "__name__" }, "direction": "ASCENDING" },
            ],
            "limit": page_size,
        });
        if let Some((key, name)) = after {
            query["startAt"] = json!({
                "values": [string_value(key), { "referenceValue": name }],
                "before": false,
            });
        }
        query
    }
}
