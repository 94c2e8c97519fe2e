//! A lock's shared holders (readers, DESIGN §12) as a field of the key's fence counter
//! document: `readers` (array, in fence order, of maps `lockId` (string), `fence` (string, 15
//! digits), `expiresAtMs` and `acquiredAtMs` (integers), and `holder` (string) when given —
//! a semaphore's permit's fields, read and written by the same code). A counter document that
//! never had a reader, or has none left, has no such field, so the TypeScript SyncGuard's
//! counter documents read as "no readers".
//!
//! Why there: every exclusive acquisition already reads the counter document (for the fence
//! and the line) and commits it with an `updateTime` precondition, so it sees the readers in
//! the read it makes anyway and its commit fails if a reader came in between; and a reader
//! needs the counter anyway, for its fence. Each reader keeps its own expiry: expired readers
//! are never counted and are dropped by the next write of the document.

use serde_json::{Map, Value};

use super::rest::{Document, array_value, map_of};
use super::semaphore_doc::Permit;
use crate::error::{LockError, Result};

/// The most live readers one key holds at once: a reader takes about 100 bytes of the counter
/// document (under 400 with a 256-byte holder), so 2000 of them stay under 800 KB and leave
/// room for the line within Firestore's 1 MiB document limit. A reader beyond it is refused
/// (a waiter waits in line for one to leave), as if a writer held the key.
pub const MAX_READERS: usize = 2000;

/// The readers stored in `document` (none when there is no document or no `readers` field),
/// in fence order, expired ones included; or why they are not SyncGuard readers: `Internal`,
/// naming `key`, and the document is never written over.
pub(super) fn parse_readers(document: Option<&Document>, key: &str) -> Result<Vec<Permit>> {
    let Some(document) = document else {
        return Ok(Vec::new());
    };
    if !document.has("readers") {
        return Ok(Vec::new());
    }
    let mut readers = document
        .array("readers")
        .and_then(|values| {
            values
                .iter()
                .map(|value| map_of(value).and_then(Permit::parse))
                .collect::<Option<Vec<Permit>>>()
        })
        .ok_or_else(|| {
            LockError::internal(
                "a Firestore fence counter document's readers are not SyncGuard readers: \
                 `readers` is not an array of maps of `lockId`, `fence` (15 digits), \
                 `expiresAtMs` and `acquiredAtMs` (integers from 0 to 2^53 - 1)",
            )
            .with_key(key)
        })?;
    // Written in fence order; sorted again so that a hand-edited document cannot make
    // `find_shared` answer out of order.
    readers.sort_by_key(|reader| reader.fence);
    Ok(readers)
}

/// Adds the `readers` field to `fields` (a counter document's typed fields), unless there is
/// no reader: then the document is written as the TypeScript SyncGuard writes it.
pub(super) fn add_reader_fields(readers: &[Permit], fields: &mut Map<String, Value>) {
    if readers.is_empty() {
        return;
    }
    let values = readers.iter().map(Permit::value).collect();
    fields.insert("readers".to_owned(), array_value(values));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::Fence;

    fn document(fields: Map<String, Value>) -> Document {
        Document::for_tests("projects/p/x/k", Value::Object(fields))
    }

    #[test]
    fn readers_read_back_in_fence_order_and_none_write_nothing() {
        let mut fields = Map::new();
        add_reader_fields(&[], &mut fields);
        assert!(fields.is_empty());
        assert!(parse_readers(Some(&document(fields)), "k").unwrap().is_empty());

        let reader = |counter, holder: Option<&str>| Permit {
            lock_id: crate::driver::generate_lock_id(),
            fence: Fence::from_counter(counter).unwrap(),
            expires_at_ms: 10,
            acquired_at_ms: 1,
            holder: holder.map(str::to_owned),
        };
        let readers = vec![reader(5, Some("r")), reader(3, None)];
        let mut fields = Map::new();
        add_reader_fields(&readers, &mut fields);
        let read = parse_readers(Some(&document(fields)), "k").unwrap();
        assert_eq!(read, vec![readers[1].clone(), readers[0].clone()]);
    }

    #[test]
    fn readers_that_are_not_ours_are_an_error_naming_the_key() {
        let mut fields = Map::new();
        fields.insert("readers".to_owned(), serde_json::json!({ "stringValue": "x" }));
        let error = parse_readers(Some(&document(fields)), "k").unwrap_err();
        assert_eq!(error.code(), crate::ErrorCode::Internal);
        assert_eq!(error.key(), Some("k"));
    }
}
