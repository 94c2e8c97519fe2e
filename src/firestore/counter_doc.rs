//! A key's fence counter document as read, whole: the last fence issued, the lock's line
//! (`line_doc.rs`) and its shared holders (`readers_doc.rs`), and the write that puts it back
//! with all three, conditioned on the document being as read. Whatever writes the counter
//! document goes through here, so that no write drops the line or the readers.

use serde_json::{Map, Value, json};

use super::commit::unchanged_since;
use super::document::{LockDoc, parse_counter};
use super::line_doc::{add_line_fields, parse_line};
use super::readers_doc::{add_reader_fields, parse_readers};
use super::rest::{Document, string_value};
use super::semaphore_doc::Permit;
use crate::driver::Places;
use crate::error::Result;
use crate::fence::Fence;

/// A fence counter document as read (or absent), and its contents.
pub(super) struct CounterDoc {
    /// The document's full name.
    pub(super) name: String,
    /// The document as read, for the precondition (`None`: it did not exist).
    pub(super) read: Option<Document>,
    /// The last fence issued (0: none yet).
    pub(super) counter: u64,
    /// The lock's line.
    pub(super) line: Places,
    /// The lock's shared holders, in fence order, expired ones included until reclaimed.
    pub(super) readers: Vec<Permit>,
}

impl CounterDoc {
    /// The counter document `name` of `key`, as `read`; a document that is not ours is
    /// `Internal`, naming `key`.
    pub(super) fn parse(name: String, read: Option<Document>, key: &str) -> Result<CounterDoc> {
        let counter = match &read {
            None => 0,
            Some(document) => parse_counter(document, key)?,
        };
        let line = parse_line(read.as_ref(), key, "fence counter")?;
        let readers = parse_readers(read.as_ref(), key)?;
        Ok(CounterDoc {
            name,
            read,
            counter,
            line,
            readers,
        })
    }

    /// Drops the readers expired at `now_ms`.
    pub(super) fn reclaim(&mut self, now_ms: i64) {
        self.readers.retain(|reader| reader.is_live(now_ms));
    }

    /// The write of a waiter's place (taken or renewed) for the lock of `key`: the document as
    /// it is now, at the fence it had. A counter missing under a live lock `held` (only a
    /// hand-written lock has none) is restored at that lock's fence, which its acquisition
    /// would have written.
    pub(super) fn place_write(&self, key: &str, held: Option<&LockDoc>) -> Result<Value> {
        let fence = match (self.counter, held) {
            (0, Some(lock)) => lock.fence,
            (counter, _) => Fence::from_counter(counter).map_err(|e| e.with_key(key))?,
        };
        Ok(self.write(key, fence))
    }

    /// The write of the document with `fence` as its counter, its line and readers as they
    /// are now, applied only if the document is still as read.
    pub(super) fn write(&self, key: &str, fence: Fence) -> Value {
        json!({
            "update": {
                "name": self.name,
                "fields": counter_fields(key, fence, &self.line, &self.readers),
            },
            "currentDocument": unchanged_since(self.read.as_ref()),
        })
    }
}

/// The fields of the fence counter document of `key`: the last fence issued, `keyDebug` (as
/// the TypeScript SyncGuard writes them), the lock's line when it was ever used, and its
/// shared holders when there are any.
fn counter_fields(key: &str, fence: Fence, line: &Places, readers: &[Permit]) -> Value {
    let mut fields = Map::new();
    fields.insert("fence".to_owned(), string_value(&fence.to_string()));
    fields.insert("keyDebug".to_owned(), string_value(key));
    add_line_fields(line, &mut fields);
    add_reader_fields(readers, &mut fields);
    Value::Object(fields)
}
