//! The semaphore document ([`SemaphoreDoc`]): one per semaphore, holding all its permits, its
//! own fence counter and its line of waiters (`line_doc.rs`), its collection and id, and what is checked when it is read — a
//! document that is not a SyncGuard semaphore is an error naming its key, never "no permits".

use serde_json::{Map, Value, json};

use super::document::document_id;
use super::line_doc::{add_line_fields, parse_line};
use super::rest::{
    Document, array_value, integer_of, integer_value, map_of, map_value, string_of, string_value,
};
use crate::driver::{LockRecord, Places, TIME_TOLERANCE_MS, is_live};
use crate::error::{LockError, Result};
use crate::fence::Fence;

/// The collection semaphores are kept in, named after the lock collection `collection`:
/// beside it, never in it, so lock cleanups and listings never meet a semaphore.
pub(super) fn semaphore_collection_of(collection: &str) -> String {
    format!("{collection}_semaphores")
}

/// The semaphore document id of a user key: derived as a lock document id is (the same id,
/// in another collection).
pub(super) fn semaphore_document_id(key: &str) -> Result<String> {
    document_id(key)
}

/// One permit, as stored in the `permits` array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Permit {
    pub(super) lock_id: String,
    pub(super) fence: Fence,
    pub(super) expires_at_ms: i64,
    pub(super) acquired_at_ms: i64,
    pub(super) holder: Option<String>,
}

impl Permit {
    /// Whether it is live at `now_ms` (client clock, with the tolerance).
    pub(super) fn is_live(&self, now_ms: i64) -> bool {
        is_live(self.expires_at_ms, now_ms, TIME_TOLERANCE_MS)
    }

    /// The raw record of this permit of the semaphore on `key`.
    pub(super) fn record(&self, key: &str) -> LockRecord {
        let Permit {
            lock_id,
            fence,
            expires_at_ms,
            acquired_at_ms,
            holder,
        } = self.clone();
        LockRecord {
            key: key.to_owned(),
            lock_id,
            expires_at_ms,
            acquired_at_ms,
            fence,
            holder,
        }
    }

    fn value(&self) -> Value {
        let mut fields = json!({
            "lockId": string_value(&self.lock_id),
            "fence": string_value(&self.fence.to_string()),
            "expiresAtMs": integer_value(self.expires_at_ms),
            "acquiredAtMs": integer_value(self.acquired_at_ms),
        });
        if let Some(holder) = &self.holder {
            fields["holder"] = string_value(holder);
        }
        map_value(fields)
    }

    fn parse(fields: &Map<String, Value>) -> Option<Permit> {
        let time = |field: &str| {
            fields
                .get(field)
                .and_then(integer_of)
                .filter(|ms| (0..=MAX_SAFE_INTEGER).contains(ms))
        };
        Some(Permit {
            lock_id: fields
                .get("lockId")
                .and_then(string_of)
                .filter(|id| !id.is_empty())?
                .to_owned(),
            fence: fields.get("fence").and_then(string_of)?.parse().ok()?,
            expires_at_ms: time("expiresAtMs")?,
            acquired_at_ms: time("acquiredAtMs")?,
            holder: fields.get("holder").and_then(string_of).map(str::to_owned),
        })
    }
}

/// As for lock documents: the largest integer a JavaScript number holds exactly.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

/// A semaphore document, as read (or empty, for a semaphore never acquired): its permits in
/// fence order, expired ones included until something reclaims them, the last fence it
/// issued, and its line.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct SemaphoreDoc {
    /// The last fence issued (0 before the first): never lowered, the document never deleted.
    pub(super) counter: u64,
    pub(super) permits: Vec<Permit>,
    /// The semaphore's line of waiters (not the lock's of the same key).
    pub(super) line: Places,
}

impl SemaphoreDoc {
    /// The semaphore `document` holds (empty when there is none), or why it is not a
    /// SyncGuard semaphore document: `key` a string, `fence` 15 digits, `permits` an array of
    /// maps each with `lockId`, `fence`, `expiresAtMs`, `acquiredAtMs` (and `holder`, a
    /// string, when given), and a line as `line_doc.rs` reads it. Anything else is `Internal`, naming `key`, and is never
    /// overwritten.
    pub(super) fn parse(document: Option<&Document>, key: &str) -> Result<SemaphoreDoc> {
        let Some(document) = document else {
            return Ok(SemaphoreDoc::default());
        };
        let not_a_semaphore = |problem: &str| {
            LockError::internal(format!(
                "a Firestore semaphore document is not a SyncGuard semaphore: {problem}"
            ))
            .with_key(key)
        };
        if document.string("key").is_none() {
            return Err(not_a_semaphore("`key` is not a string"));
        }
        let counter = document
            .string("fence")
            .and_then(|fence| fence.parse::<Fence>().ok())
            .map(Fence::value)
            .ok_or_else(|| not_a_semaphore("`fence` is not 15 digits (not all zero)"))?;
        let permits = document
            .array("permits")
            .ok_or_else(|| not_a_semaphore("`permits` is not an array"))?
            .iter()
            .map(|value| map_of(value).and_then(Permit::parse))
            .collect::<Option<Vec<Permit>>>()
            .ok_or_else(|| {
                not_a_semaphore(
                    "a permit is not a map of `lockId`, `fence` (15 digits), `expiresAtMs` and \
                     `acquiredAtMs` (integers from 0 to 2^53 - 1)",
                )
            })?;
        if permits.iter().any(|permit| permit.fence.value() > counter) {
            return Err(not_a_semaphore("a permit's fence is above the counter"));
        }
        let line = parse_line(Some(document), key, "semaphore")?;
        let mut doc = SemaphoreDoc {
            counter,
            permits,
            line,
        };
        // Written in fence order; sorted again so that a hand-edited document cannot make
        // `find` answer out of order.
        doc.permits.sort_by_key(|permit| permit.fence);
        Ok(doc)
    }

    /// The document's fields, for the semaphore on `key`.
    pub(super) fn fields(&self, key: &str) -> Result<Value> {
        let fence = Fence::from_counter(self.counter).map_err(|e| e.with_key(key))?;
        let mut fields = Map::new();
        fields.insert("key".to_owned(), string_value(key));
        fields.insert("fence".to_owned(), string_value(&fence.to_string()));
        let permits = self.permits.iter().map(Permit::value).collect();
        fields.insert("permits".to_owned(), array_value(permits));
        add_line_fields(&self.line, &mut fields);
        Ok(Value::Object(fields))
    }

    /// Drops the permits expired at `now_ms`; whether any was.
    pub(super) fn reclaim(&mut self, now_ms: i64) -> bool {
        let before = self.permits.len();
        self.permits.retain(|permit| permit.is_live(now_ms));
        self.permits.len() != before
    }

    /// The position of the permit held under `lock_id`, live or not.
    pub(super) fn position(&self, lock_id: &str) -> Option<usize> {
        self.permits
            .iter()
            .position(|permit| permit.lock_id == lock_id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn permit(counter: u64, expires_at_ms: i64, holder: Option<&str>) -> Permit {
        Permit {
            lock_id: crate::driver::generate_lock_id(),
            fence: Fence::from_counter(counter).unwrap(),
            expires_at_ms,
            acquired_at_ms: 1,
            holder: holder.map(str::to_owned),
        }
    }

    #[test]
    fn fields_read_back() {
        let mut doc = SemaphoreDoc {
            counter: 7,
            permits: vec![permit(3, 100, None), permit(7, 200, Some("worker 1"))],
            ..SemaphoreDoc::default()
        };
        let place = crate::driver::LockId::generate();
        let _ = doc
            .line
            .admit(crate::driver::Line::Wait(&place), 0, false, 100, None);
        let fields = doc.fields("k").unwrap();
        let document = Document::for_tests("projects/p/x/k", fields);
        assert_eq!(SemaphoreDoc::parse(Some(&document), "k").unwrap(), doc);
        assert_eq!(
            SemaphoreDoc::parse(None, "k").unwrap(),
            SemaphoreDoc::default()
        );
    }

    #[test]
    fn foreign_documents_are_errors() {
        let good = SemaphoreDoc {
            counter: 2,
            permits: vec![permit(2, 100, None)],
            ..SemaphoreDoc::default()
        }
        .fields("k")
        .unwrap();
        let mut broken = Vec::new();
        for field in ["key", "fence", "permits"] {
            let mut fields = good.clone();
            fields.as_object_mut().unwrap().remove(field);
            broken.push(fields);
        }
        let mut fields = good.clone();
        fields["permits"]["arrayValue"]["values"][0]["mapValue"]["fields"]["fence"] =
            string_value("12");
        broken.push(fields);
        let mut fields = good.clone();
        fields["fence"] = string_value("000000000000001");
        broken.push(fields);
        for fields in broken {
            let document = Document::for_tests("projects/p/x/k", fields.clone());
            let error = SemaphoreDoc::parse(Some(&document), "k").unwrap_err();
            assert_eq!(error.code(), crate::ErrorCode::Internal, "{fields}");
        }
    }

    #[test]
    fn reclaims_expired_permits_only() {
        let mut doc = SemaphoreDoc {
            counter: 2,
            permits: vec![permit(1, 1_000, None), permit(2, 10_000, None)],
            ..SemaphoreDoc::default()
        };
        assert!(!doc.reclaim(1_000 + TIME_TOLERANCE_MS - 1));
        assert!(doc.reclaim(5_000));
        assert_eq!(doc.permits.len(), 1);
        assert_eq!(doc.permits[0].fence.value(), 2);
    }
}
