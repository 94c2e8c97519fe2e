//! The documents: a lock document ([`LockDoc`]) and a fence counter document as the
//! TypeScript SyncGuard writes them (the counter document also carries the lock's line of
//! waiters, see `line_doc.rs`), their ids, and how a lease carries a lock document's version. What is read is checked here: a document that is not a SyncGuard record is an
//! error naming its key, never a lock nor an absence.

use super::rest::Document;
use crate::driver::{LockRecord, Version, make_storage_key};
use crate::error::{LockError, Result};
use crate::fence::Fence;
use crate::key::hashed_storage_key;

/// Firestore's document-id limit in bytes.
pub const STORAGE_KEY_LIMIT: usize = 1500;

/// Whether Firestore refuses `id` as a document (or collection) id.
pub(super) fn is_rejected_id(id: &str) -> bool {
    id.contains('/')
        || id == "."
        || id == ".."
        || (id.len() >= 4 && id.starts_with("__") && id.ends_with("__"))
}

/// The document id for `key` (already a storage-key input): [`make_storage_key`], or its
/// hashed form where Firestore would reject the id.
pub(super) fn document_id(key: &str) -> Result<String> {
    let id = make_storage_key("", key, STORAGE_KEY_LIMIT, 0)?;
    Ok(if is_rejected_id(&id) {
        hashed_storage_key("", key)
    } else {
        id
    })
}

/// The fence counter document id that belongs to a lock document id.
pub(super) fn fence_document_id_of(lock_doc_id: &str) -> Result<String> {
    document_id(&format!("fence:{lock_doc_id}"))
}

/// A lock document's version as a lease carries it: the expiry it was written with and its
/// `updateTime`, so that a renewal can check liveness and precondition on it without a read.
pub(super) fn version_of(update_time: &str, expires_at_ms: i64) -> Version {
    Version::new(format!("{expires_at_ms}|{update_time}"))
}

/// The expiry and `updateTime` of a [`version_of`].
pub(super) fn parse_version(version: &Version) -> Option<(i64, &str)> {
    let (expires_at_ms, update_time) = version.as_str().split_once('|')?;
    Some((expires_at_ms.parse().ok()?, update_time))
}

/// A lock document, as read.
pub(super) struct LockDoc {
    pub(super) lock_id: String,
    pub(super) expires_at_ms: i64,
    pub(super) acquired_at_ms: i64,
    pub(super) key: String,
    pub(super) fence: Fence,
    pub(super) holder: Option<String>,
    pub(super) name: String,
    pub(super) update_time: String,
}

/// The largest integer a JavaScript number holds exactly: the TypeScript SyncGuard's times are
/// numbers, and no clock this side of the year 287 000 reaches it. An expiry beyond it would
/// hold a key forever.
const MAX_SAFE_INTEGER: i64 = (1 << 53) - 1;

impl LockDoc {
    /// A SyncGuard lock record, or why the document is not one: `lockId` a non-empty string,
    /// `expiresAtMs` and `acquiredAtMs` integers from 0 to 2^53 − 1, `key` a string, `fence`
    /// 15 digits (not all zero). Other fields are tolerated (a later version may add some);
    /// `holder`, ours, is read when it is a string (it is absent from the TypeScript
    /// SyncGuard's documents, and anything else under that name is not ours: none).
    ///
    /// Anything else is stored data that is not a lock — reading again finds the same — so
    /// every operation answers it alike: `Internal`, naming the key (`key`, the key the
    /// caller asked for when known), never "locked" and never "absent", and nothing is
    /// written over it.
    pub(super) fn parse(document: &Document, key: Option<&str>) -> Result<LockDoc> {
        let stored_key = document.string("key");
        let not_a_lock = |problem: &str| {
            let error = LockError::internal(format!(
                "a Firestore lock document is not a SyncGuard lock record: {problem}"
            ));
            // The caller's key, or the one the document names, or its document id: whatever
            // lets an operator find it.
            match key.or(stored_key) {
                Some(key) => error.with_key(key),
                None => error.with_key(document.name().rsplit('/').next().unwrap_or_default()),
            }
        };
        let lock_id = document
            .string("lockId")
            .filter(|id| !id.is_empty())
            .ok_or_else(|| not_a_lock("`lockId` is not a non-empty string"))?;
        let time = |field: &str| {
            document
                .integer(field)
                .filter(|ms| (0..=MAX_SAFE_INTEGER).contains(ms))
                .ok_or_else(|| {
                    not_a_lock(&format!(
                        "`{field}` is not an integer from 0 to 2^53 - 1 (milliseconds)"
                    ))
                })
        };
        let expires_at_ms = time("expiresAtMs")?;
        let acquired_at_ms = time("acquiredAtMs")?;
        let stored_key = stored_key.ok_or_else(|| not_a_lock("`key` is not a string"))?;
        let fence = document
            .string("fence")
            .and_then(|fence| fence.parse::<Fence>().ok())
            .ok_or_else(|| not_a_lock("`fence` is not 15 digits (not all zero)"))?;
        Ok(LockDoc {
            lock_id: lock_id.to_owned(),
            expires_at_ms,
            acquired_at_ms,
            key: stored_key.to_owned(),
            fence,
            holder: document.string("holder").map(str::to_owned),
            name: document.name().to_owned(),
            update_time: document.update_time().to_owned(),
        })
    }

    pub(super) fn record(self) -> LockRecord {
        LockRecord {
            key: self.key,
            lock_id: self.lock_id,
            expires_at_ms: self.expires_at_ms,
            acquired_at_ms: self.acquired_at_ms,
            fence: self.fence,
            holder: self.holder,
        }
    }
}

/// The fence counter a counter document holds: 15 digits (not all zero). Anything else stops
/// the acquisition that read it, before it writes anything: `Internal`, naming the key.
pub(super) fn parse_counter(document: &Document, key: &str) -> Result<u64> {
    document
        .string("fence")
        .and_then(|text| text.parse::<Fence>().ok())
        .map(Fence::value)
        .ok_or_else(|| {
            LockError::internal(
                "a Firestore fence counter document is not a SyncGuard fence counter: `fence` \
                 is not 15 digits (not all zero)",
            )
            .with_key(key)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rejected_document_ids_are_hashed() {
        for key in ["a/b/c", ".", "..", "__reserved__"] {
            let id = document_id(key).unwrap();
            assert_eq!(id.len(), 22, "{key} → {id}");
            assert!(!is_rejected_id(&id));
            assert_eq!(id, hashed_storage_key("", key));
        }
        for key in ["plain", "__x", "x__", "_._", "a.b", "..."] {
            assert_eq!(document_id(key).unwrap(), key);
        }
    }
}
