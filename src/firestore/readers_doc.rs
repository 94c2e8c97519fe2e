//! A lock's shared holders (readers, DESIGN §12) as a field of the key's fence counter
//! document: `readers`, a string holding a JSON array, in fence order, of objects `lockId`
//! (string), `fence` (string, 15 digits), `expiresAtMs` and `acquiredAtMs` (integers), and
//! `holder` (string) when given. A counter document that never had a reader, or has none
//! left, has no such field, so the TypeScript SyncGuard's counter documents read as "no
//! readers".
//!
//! Why there: every exclusive acquisition already reads the counter document (for the fence
//! and the line) and commits it with an `updateTime` precondition, so it sees the readers in
//! the read it makes anyway and its commit fails if a reader came in between; and a reader
//! needs the counter anyway, for its fence. Each reader keeps its own expiry: expired readers
//! are never counted and are dropped by the next write of the document.
//!
//! Why one string and not an array of maps: Firestore indexes every value of every map in an
//! array, so a document with a thousand readers written as maps costs thousands of index
//! entries at every write (and slowed the emulator to minutes for a thousand readers); a
//! string is one value, indexed on its first 1500 bytes only, and about half the size.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::rest::{Document, string_value};
use super::semaphore_doc::Permit;
use crate::error::{LockError, Result};

/// The most live readers one key holds at once: a reader takes about 110 bytes of the counter
/// document (under 400 with a 256-byte holder), so 2000 of them stay under 800 KB and leave
/// room for the line within Firestore's 1 MiB document limit. A reader beyond it is refused
/// (a waiter waits in line for one to leave), as if a writer held the key.
pub const MAX_READERS: usize = 2000;

/// One reader as stored in the `readers` string.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Stored {
    lock_id: String,
    fence: String,
    expires_at_ms: i64,
    acquired_at_ms: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    holder: Option<String>,
}

/// As for lock documents: the largest integer a JavaScript number holds exactly.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl Stored {
    fn reader(self) -> Option<Permit> {
        let time = |ms: i64| Some(ms).filter(|ms| (0..=MAX_SAFE_INTEGER).contains(ms));
        Some(Permit {
            lock_id: Some(self.lock_id).filter(|id| !id.is_empty())?,
            fence: self.fence.parse().ok()?,
            expires_at_ms: time(self.expires_at_ms)?,
            acquired_at_ms: time(self.acquired_at_ms)?,
            holder: self.holder,
        })
    }

    fn of(reader: &Permit) -> Stored {
        Stored {
            lock_id: reader.lock_id.clone(),
            fence: reader.fence.to_string(),
            expires_at_ms: reader.expires_at_ms,
            acquired_at_ms: reader.acquired_at_ms,
            holder: reader.holder.clone(),
        }
    }
}

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
        .string("readers")
        .and_then(|text| serde_json::from_str::<Vec<Stored>>(text).ok())
        .and_then(|stored| {
            stored
                .into_iter()
                .map(Stored::reader)
                .collect::<Option<Vec<_>>>()
        })
        .ok_or_else(|| {
            LockError::internal(
                "a Firestore fence counter document's readers are not SyncGuard readers: \
                 `readers` is not a string holding a JSON array of objects with `lockId`, \
                 `fence` (15 digits), `expiresAtMs` and `acquiredAtMs` (integers from 0 to \
                 2^53 - 1)",
            )
            .with_key(key)
        })?;
    // Written in fence order; sorted again so that a hand-edited document cannot make
    // `find` answer out of order.
    readers.sort_by_key(|reader| reader.fence);
    Ok(readers)
}

/// Adds the `readers` field to `fields` (a counter document's typed fields), unless there is
/// no reader: then the document is written as the TypeScript SyncGuard writes it.
pub(super) fn add_reader_fields(readers: &[Permit], fields: &mut Map<String, Value>) {
    if readers.is_empty() {
        return;
    }
    let stored: Vec<Stored> = readers.iter().map(Stored::of).collect();
    // Serialising plain strings and integers cannot fail; were it to, the empty string would
    // be refused by the next read as not ours, never taken for "no readers".
    let text = serde_json::to_string(&stored).unwrap_or_default();
    fields.insert("readers".to_owned(), string_value(&text));
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
        assert!(
            parse_readers(Some(&document(fields)), "k")
                .unwrap()
                .is_empty()
        );

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
        fields.insert("readers".to_owned(), string_value("[{\"lockId\": 1}]"));
        let error = parse_readers(Some(&document(fields)), "k").unwrap_err();
        assert_eq!(error.code(), crate::ErrorCode::Internal);
        assert_eq!(error.key(), Some("k"));
    }
}
