//! Key layouts: how a lock's record, its lock-id index entry and its fence counter are named
//! (the rules are on [`KeyLayout`]).

use crate::driver::{LOCK_ID_LENGTH, LeaseKind, LockId, make_storage_key};
use crate::error::{LockError, Result};
use crate::hash::truncated_hash;

/// Redis' storage-key limit in bytes.
pub const STORAGE_KEY_LIMIT: usize = 1000;
/// Bytes [`make_storage_key`](crate::driver::make_storage_key) keeps free for derived suffixes.
pub const STORAGE_KEY_RESERVE: usize = 26;
/// The default key prefix, shared with the TypeScript SyncGuard.
pub const DEFAULT_PREFIX: &str = "syncguard";

/// The namespaces under the prefix that hold index entries and fence counters.
const RESERVED_SEGMENTS: [&str; 2] = ["id", "fence"];

/// How a [`RedisBackend`](super::RedisBackend) names its keys (see also [Key
/// layouts](super#key-layouts)).
///
/// For a user key `K` (NFC) under the prefix `P`, with `msk` =
/// [`make_storage_key`](crate::driver::make_storage_key) at Redis' limit (1000 bytes, 26
/// reserved):
///
/// | | [`TypeScript`](KeyLayout::TypeScript) | [`Cluster`](KeyLayout::Cluster) |
/// |---|---|---|
/// | lock record | `L = msk(P, K)` | `P:{T}` |
/// | lock-id index | `msk(P, "id:" + lockId)` (= `P:id:lockId`) | `P:id:{lockId}` |
/// | fence counter | `msk(P, "fence:" + L)` | `P:fence:{T}` |
///
/// The cluster layout's *tag* `T` is `K` itself when `P:K` stays unhashed under `msk` and `K`
/// contains neither `{` nor `}`; otherwise it is the 22-character hash `msk` uses for long
/// keys (the first 16 bytes of SHA-256 of `P:K`, base64url without padding). So every tag is
/// non-empty and brace-free, and Redis hashes exactly `T`: the record and the counter share a
/// hash slot. The index entry's tag is the lock id, an ordinary lock id (16 bytes from the OS
/// CSPRNG, 22 base64url characters, 128 bits, as the specification requires): the index entry
/// lives in the lock id's own slot, generally not the lock's. So no script touches it: the
/// scripts work on the record and the counter, and the index entry is written, extended and
/// deleted by plain commands beside them (pipelined on one server; see the module's
/// [Key layouts](super#key-layouts) for the requests per operation and why a stale or missing
/// index entry is safe). A lock id alone still finds its lock: `GET P:id:{lockId}` names the
/// record, whose stored lock id every script compares. The layout also keeps the three
/// namespaces apart (a user key can never name another lock's counter or index entry, as it
/// can in the TypeScript layout), and its prefix may not contain `{` or `}`.
///
/// ```
/// use syncguard::redis::KeyLayout;
/// assert_eq!(KeyLayout::Cluster.lock_key("syncguard", "job")?, "syncguard:{job}");
/// assert_eq!(KeyLayout::Cluster.fence_key("syncguard", "job")?, "syncguard:fence:{job}");
/// assert_eq!(KeyLayout::TypeScript.fence_key("syncguard", "job")?, "syncguard:fence:syncguard:job");
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum KeyLayout {
    /// The TypeScript SyncGuard's keys, byte for byte: Rust and Node services share locks on a
    /// single server. The default there. A Cluster refuses it (its three keys of a lock lie in
    /// different hash slots).
    #[default]
    TypeScript,
    /// Hash-tagged keys: a lock's record and fence counter in the key's hash slot, its index
    /// entry in the lock id's. The only layout on a Cluster; choosable on a single server (or behind Sentinel) so that a
    /// deployment can move to a Cluster later without renaming its keys. The TypeScript
    /// SyncGuard cannot share these locks.
    Cluster,
}

impl KeyLayout {
    /// The name used in URLs (`?layout=typescript|cluster`).
    pub fn as_str(self) -> &'static str {
        match self {
            KeyLayout::TypeScript => "typescript",
            KeyLayout::Cluster => "cluster",
        }
    }

    /// The Redis key of the lock record of `key` under `prefix` in this layout (the prefix
    /// checked as [`RedisBuilder::key_prefix`](super::RedisBuilder::key_prefix) checks it).
    pub fn lock_key(self, prefix: &str, key: &str) -> Result<String> {
        let key = crate::driver::Key::new(key)?;
        Ok(self.keys(prefix)?.lock_keys(key.as_str())?.lock)
    }

    /// The Redis key of the fence counter of `key` under `prefix` in this layout.
    pub fn fence_key(self, prefix: &str, key: &str) -> Result<String> {
        let key = crate::driver::Key::new(key)?;
        Ok(self.keys(prefix)?.lock_keys(key.as_str())?.fence)
    }

    /// The Redis keys of the semaphore on `key` under `prefix`: the same in both layouts (see
    /// [`SemaphoreKeys`]).
    ///
    /// ```
    /// use syncguard::redis::KeyLayout;
    /// let keys = KeyLayout::Cluster.semaphore_keys("syncguard", "job")?;
    /// assert_eq!(keys.holders, "syncguard{job}:sem:holders");
    /// assert_eq!(keys.permits, "syncguard{job}:sem:permits");
    /// assert_eq!(keys.fence, "syncguard{job}:sem:fence");
    /// assert_eq!(keys, KeyLayout::TypeScript.semaphore_keys("syncguard", "job")?);
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn semaphore_keys(self, prefix: &str, key: &str) -> Result<SemaphoreKeys> {
        let key = crate::driver::Key::new(key)?;
        self.keys(prefix)?.semaphore_keys(key.as_str())
    }

    /// The Redis key of the index entry of `lock_id` under `prefix` in this layout.
    pub fn index_key(self, prefix: &str, lock_id: &str) -> Result<String> {
        let lock_id = LockId::new(lock_id)?;
        Ok(self.keys(prefix)?.index_key(&lock_id))
    }

    fn keys(self, prefix: &str) -> Result<Keys> {
        Keys::new(validate_prefix(prefix, "key_prefix")?, self)
    }

    /// Reads a URL's `layout` parameter.
    pub(crate) fn from_url_value(value: &str) -> Result<KeyLayout> {
        match value {
            "typescript" => Ok(KeyLayout::TypeScript),
            "cluster" => Ok(KeyLayout::Cluster),
            _ => Err(LockError::invalid_argument(
                "the Redis URL parameter `layout` must be typescript or cluster",
            )),
        }
    }
}

/// The key names of one backend: its prefix (validated, without trailing `:`) and layout.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    prefix: String,
    layout: KeyLayout,
}

/// A lock's record and fence counter keys.
pub(crate) struct LockKeys {
    pub lock: String,
    pub fence: String,
}

/// The Redis keys of one key's semaphore (see [Semaphores](super#semaphores)): `P{T}:sem:…`,
/// with the cluster layout's tag `T` of the user key, in both layouts.
///
/// Why not `P:sem:…`: every lock key of the prefix `P`, in either layout, starts with `P:`
/// (`P:K` for any user key `K` in the TypeScript layout, so `P:sem:job` would be the lock of
/// the user key `sem:job`). These names start with `P{` instead, which no lock record,
/// index entry or fence counter of `P` does; and they end in `:holders`, `:permits` or
/// `:fence`, while every cluster-layout key of any prefix ends in `}`. The tag puts the three
/// keys in one hash slot, as a Cluster requires of a script's keys.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SemaphoreKeys {
    /// Sorted set: each held permit's lock id, scored by its expiry (Unix ms of Redis `TIME`).
    pub holders: String,
    /// Hash: each held permit's lock id → its JSON record (`lockId`, `expiresAtMs`,
    /// `acquiredAtMs`, `key`, `fence`, and `holder` when given).
    pub permits: String,
    /// String: the semaphore's own fence counter (`INCR`); never expires, never deleted.
    pub fence: String,
}

/// The Redis keys of the shared holders (readers) of the lock on one user key (see [Shared
/// holders](super#shared-holders)): `P{T}:shared:…`, with the cluster layout's tag `T` of the
/// user key, in both layouts. The tag puts them in the hash slot of the lock's line (and, in the
/// cluster layout, of the lock record and its fence counter), so that the exclusive acquire
/// counts the live readers in the script it runs anyway. The TypeScript SyncGuard knows none of
/// them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedKeys {
    /// Sorted set: each shared holder's lock id, scored by its expiry (Unix ms of Redis `TIME`).
    pub holders: String,
    /// Hash: each shared holder's lock id → its JSON record (`lockId`, `expiresAtMs`,
    /// `acquiredAtMs`, `key`, `fence` from the lock's counter, and `holder` when given).
    pub records: String,
}

/// The Redis keys of one line of waiters (see [The line](super#the-line)): the line of the lock
/// on a user key, `P{T}:line:…`, or of its semaphore, `P{T}:sem:line:…`, with the cluster
/// layout's tag `T` of the user key, in both layouts. The tag puts them in the hash slot of the
/// lock's (and the semaphore's) other keys, so that the acquire script decides and writes the
/// line in the same call. Every one of them expires a little after the line's last write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineKeys {
    /// Sorted set: each place's id, scored by its ticket (the line's order).
    pub order: String,
    /// Sorted set: each place's id, scored by its expiry (Unix ms of Redis `TIME`): every
    /// expired place is found with one `ZRANGEBYSCORE`.
    pub expiry: String,
    /// Hash: each place's id → its waiter's holder text (empty: none), and the field `ticket`:
    /// the last ticket issued (`HINCRBY`; no place id is 6 characters long).
    pub places: String,
}

/// What every key under one user key's hash tag begins with, `P{T}` ([`Keys::tagged`]).
pub(crate) struct Tagged(String);

impl Tagged {
    /// `P{T}` followed by `parts`.
    fn key(&self, parts: &[&str]) -> String {
        let mut key =
            String::with_capacity(self.0.len() + parts.iter().map(|p| p.len()).sum::<usize>());
        key.push_str(&self.0);
        parts.iter().for_each(|part| key.push_str(part));
        key
    }

    /// See [`Keys::semaphore_keys`].
    pub fn semaphore_keys(&self) -> SemaphoreKeys {
        SemaphoreKeys {
            holders: self.key(&[":sem:holders"]),
            permits: self.key(&[":sem:permits"]),
            fence: self.key(&[":sem:fence"]),
        }
    }

    /// See [`Keys::shared_keys`].
    pub fn shared_keys(&self) -> SharedKeys {
        SharedKeys {
            holders: self.key(&[":shared:holders"]),
            records: self.key(&[":shared:records"]),
        }
    }

    /// See [`Keys::line_keys`].
    pub fn line_keys(&self, kind: LeaseKind) -> LineKeys {
        let line = match kind {
            LeaseKind::Lock | LeaseKind::Shared => ":line",
            LeaseKind::Permit => ":sem:line",
        };
        LineKeys {
            order: self.key(&[line, ":order"]),
            expiry: self.key(&[line, ":expiry"]),
            places: self.key(&[line, ":places"]),
        }
    }
}

impl Keys {
    /// Keys under `prefix` (already validated) in `layout`; `InvalidArgument` for a prefix the
    /// cluster layout cannot use.
    pub fn new(prefix: String, layout: KeyLayout) -> Result<Keys> {
        if layout == KeyLayout::Cluster && prefix.contains(['{', '}']) {
            return Err(LockError::invalid_argument(
                "a Redis key prefix for the cluster layout may not contain `{` or `}`: they \
                 would become the keys' hash tag",
            ));
        }
        Ok(Keys { prefix, layout })
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn layout(&self) -> KeyLayout {
        self.layout
    }

    /// The record and fence counter keys of the (normalised) user key `key`.
    pub fn lock_keys(&self, key: &str) -> Result<LockKeys> {
        let prefix = &self.prefix;
        match self.layout {
            KeyLayout::TypeScript => {
                let lock = self.storage_key(key)?;
                let fence = self.storage_key(&format!("fence:{lock}"))?;
                Ok(LockKeys { lock, fence })
            }
            KeyLayout::Cluster => {
                let tag = self.tag(key)?;
                Ok(LockKeys {
                    lock: format!("{prefix}:{{{tag}}}"),
                    fence: format!("{prefix}:fence:{{{tag}}}"),
                })
            }
        }
    }

    /// The keys of the semaphore on the (normalised) user key `key`: the same in both layouts,
    /// so a semaphore outlives a change of layout (see [`SemaphoreKeys`]).
    pub fn semaphore_keys(&self, key: &str) -> Result<SemaphoreKeys> {
        Ok(self.tagged(key)?.semaphore_keys())
    }

    /// The keys of the shared holders of the lock on the (normalised) user key `key` (see
    /// [`SharedKeys`]).
    pub fn shared_keys(&self, key: &str) -> Result<SharedKeys> {
        Ok(self.tagged(key)?.shared_keys())
    }

    /// The keys of the line of the lock (`kind` [`LeaseKind::Lock`]) or of the semaphore
    /// ([`LeaseKind::Permit`]) on the (normalised) user key `key` (see [`LineKeys`]).
    pub fn line_keys(&self, key: &str, kind: LeaseKind) -> Result<LineKeys> {
        Ok(self.tagged(key)?.line_keys(kind))
    }

    /// What the keys under the (normalised) user key `key`'s hash tag begin with, `P{T}`: its
    /// line's, its shared holders' and its semaphore's, named from one tag where an operation
    /// needs several of them (the tag hashes and normalises the key).
    pub fn tagged(&self, key: &str) -> Result<Tagged> {
        let tag = self.tag(key)?;
        let mut tagged = String::with_capacity(self.prefix.len() + tag.len() + 2);
        for part in [self.prefix.as_str(), "{", &tag, "}"] {
            tagged.push_str(part);
        }
        Ok(Tagged(tagged))
    }

    /// The index entry of `lock_id`.
    pub fn index_key(&self, lock_id: &LockId) -> String {
        match self.layout {
            KeyLayout::TypeScript => format!("{}:id:{}", self.prefix, lock_id.as_str()),
            KeyLayout::Cluster => format!("{}:id:{{{}}}", self.prefix, lock_id.as_str()),
        }
    }

    /// What precedes a lock id in its index key, for the `is_locked` cleanup to rebuild it in
    /// the script; empty in the cluster layout, whose index entry lies in another hash slot and
    /// expires alone. The prefix validation guarantees that `msk(P, "id:" + lockId)` is never
    /// hashed.
    pub fn cleanup_index_head(&self) -> String {
        match self.layout {
            KeyLayout::TypeScript => format!("{}:id:", self.prefix),
            KeyLayout::Cluster => String::new(),
        }
    }

    /// A fresh lock id: 16 bytes from the OS CSPRNG in every layout (the specification's 128
    /// bits; nothing about it depends on the key or its slot).
    pub fn new_lock_id(&self) -> LockId {
        LockId::generate()
    }

    /// The cluster layout's hash tag of `key` (see the module docs).
    fn tag(&self, key: &str) -> Result<String> {
        let storage_key = self.storage_key(key)?;
        // The storage key is `P:K` itself (compared in place, without building `P:K`).
        let unhashed = storage_key
            .strip_prefix(self.prefix.as_str())
            .and_then(|rest| rest.strip_prefix(':'))
            == Some(key);
        if unhashed && !key.contains(['{', '}']) {
            Ok(key.to_owned())
        } else {
            Ok(truncated_hash(&format!("{}:{key}", self.prefix)))
        }
    }

    fn storage_key(&self, key: &str) -> Result<String> {
        make_storage_key(&self.prefix, key, STORAGE_KEY_LIMIT, STORAGE_KEY_RESERVE)
    }
}

/// Checks a key prefix (given as `option`, for messages) and returns it without its trailing
/// `:`. Never empty: keys without a namespace would mix with everything else in the database.
pub(crate) fn validate_prefix(prefix: &str, option: &str) -> Result<String> {
    let prefix = prefix.strip_suffix(':').unwrap_or(prefix);
    if prefix.trim().is_empty() {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} is empty: leave it out for the default `{DEFAULT_PREFIX}`, or \
             give a namespace such as `myapp`"
        )));
    }
    // Index keys (`prefix:id:` + 22 characters) must fit unhashed: scripts rebuild them.
    let longest_index = prefix.len() + 1 + "id:".len() + LOCK_ID_LENGTH;
    if longest_index + STORAGE_KEY_RESERVE > STORAGE_KEY_LIMIT {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} of {} bytes is too long: at most {} bytes",
            prefix.len(),
            STORAGE_KEY_LIMIT - STORAGE_KEY_RESERVE - 1 - "id:".len() - LOCK_ID_LENGTH
        )));
    }
    let last_segment = prefix.rsplit(':').next().unwrap_or(prefix);
    if RESERVED_SEGMENTS.contains(&last_segment) {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} may not end in an `id` or `fence` segment (got {prefix:?}): \
             its locks would overlap another prefix's index or fence keys"
        )));
    }
    if prefix.chars().any(char::is_control) {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} may not contain control characters"
        )));
    }
    Ok(prefix.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(layout: KeyLayout) -> Keys {
        Keys::new("syncguard".to_owned(), layout).unwrap()
    }

    #[test]
    fn typescript_layout_is_the_typescript_one() {
        let keys = keys(KeyLayout::TypeScript);
        let lock = keys.lock_keys("job").unwrap();
        assert_eq!(lock.lock, "syncguard:job");
        assert_eq!(lock.fence, "syncguard:fence:syncguard:job");
        let id = LockId::new("AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        assert_eq!(keys.index_key(&id), "syncguard:id:AAAAAAAAAAAAAAAAAAAAAA");
    }

    #[test]
    fn cluster_layout_keeps_record_and_counter_in_one_slot() {
        use super::super::slot::key_slot;
        let keys = keys(KeyLayout::Cluster);
        for key in ["job", "a{b}c", "}x", "{}", "é", &"k".repeat(512)] {
            let lock = keys.lock_keys(key).unwrap();
            let slot = key_slot(lock.lock.as_bytes());
            assert_eq!(key_slot(lock.fence.as_bytes()), slot, "{key}");
        }
        assert_eq!(keys.lock_keys("job").unwrap().lock, "syncguard:{job}");
        assert_eq!(
            keys.lock_keys("job").unwrap().fence,
            "syncguard:fence:{job}"
        );
        let hashed = keys.lock_keys("a{b}").unwrap().lock;
        assert_eq!(hashed.len(), "syncguard:{}".len() + 22, "{hashed}");
        let id = LockId::new("AAAAAAAAAAAAAAAAAAAAAA").unwrap();
        assert_eq!(keys.index_key(&id), "syncguard:id:{AAAAAAAAAAAAAAAAAAAAAA}");
    }

    /// The specification's lock ids (16 CSPRNG bytes, 22 characters) in the cluster layout too:
    /// nothing in them depends on the lock, so ids for one key spread over the slots.
    #[test]
    fn cluster_lock_ids_are_plain_ids() {
        use super::super::slot::key_slot;
        let keys = keys(KeyLayout::Cluster);
        let lock_slot = key_slot(keys.lock_keys("job").unwrap().lock.as_bytes());
        let ids: Vec<LockId> = (0..200).map(|_| keys.new_lock_id()).collect();
        let slots: std::collections::HashSet<u16> = ids
            .iter()
            .map(|id| key_slot(keys.index_key(id).as_bytes()))
            .collect();
        // 200 uniform draws over 16384 slots: well over 150 distinct (a chosen slot gives 1).
        assert!(slots.len() > 150, "{} distinct slots", slots.len());
        assert!(
            ids.iter()
                .filter(|id| key_slot(keys.index_key(id).as_bytes()) == lock_slot)
                .count()
                < 10
        );
        for id in &ids {
            assert_eq!(id.as_str().len(), 22);
            let decoded = base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                id.as_str(),
            )
            .unwrap();
            assert_eq!(decoded.len(), 16);
        }
        // Every one of the 128 bits varies across ids (a fixed or derived tail would not).
        let mut ones = [0u32; 128];
        for id in &ids {
            let bytes = base64::Engine::decode(
                &base64::engine::general_purpose::URL_SAFE_NO_PAD,
                id.as_str(),
            )
            .unwrap();
            for (bit, count) in ones.iter_mut().enumerate() {
                *count += u32::from(bytes[bit / 8] >> (7 - bit % 8) & 1);
            }
        }
        assert!(ones.iter().all(|&n| (40..=160).contains(&n)), "{ones:?}");
    }

    /// A semaphore's keys share one hash slot, and none of them is a lock record, index entry
    /// or fence counter of any key under the same prefix, in either layout.
    #[test]
    fn semaphore_keys_share_a_slot_and_name_no_lock_key() {
        use super::super::slot::key_slot;
        let layouts = [keys(KeyLayout::TypeScript), keys(KeyLayout::Cluster)];
        for names in &layouts {
            for key in ["job", "sem:job", "a{b}c", "é", &"k".repeat(512)] {
                let sem = names.semaphore_keys(key).unwrap();
                let slot = key_slot(sem.holders.as_bytes());
                assert_eq!(key_slot(sem.permits.as_bytes()), slot, "{key}");
                assert_eq!(key_slot(sem.fence.as_bytes()), slot, "{key}");
                for name in [&sem.holders, &sem.permits, &sem.fence] {
                    assert!(name.len() <= STORAGE_KEY_LIMIT, "{name}");
                    // Every lock record, index entry and fence counter of the prefix starts
                    // with `syncguard:`; the cluster layout's end in `}`.
                    assert!(name.starts_with("syncguard{"), "{name}");
                    assert!(!name.ends_with('}'), "{name}");
                }
            }
        }
        // The name a careless layout would use is the lock of the user key `sem:job`.
        assert_eq!(
            layouts[0].lock_keys("sem:job").unwrap().lock,
            "syncguard:sem:job"
        );
        assert_eq!(
            layouts[0].semaphore_keys("sem:job").unwrap(),
            layouts[1].semaphore_keys("sem:job").unwrap()
        );
    }

    /// A line's keys share the hash slot of the lock's (and the semaphore's) keys, and none of
    /// them is a lock record, index entry, fence counter or semaphore key under the prefix.
    #[test]
    fn line_keys_share_the_lock_slot_and_name_no_other_key() {
        use super::super::slot::key_slot;
        for names in [keys(KeyLayout::TypeScript), keys(KeyLayout::Cluster)] {
            for key in ["job", "line:job", "a{b}c", "é", &"k".repeat(512)] {
                let sem = names.semaphore_keys(key).unwrap();
                let slot = key_slot(sem.holders.as_bytes());
                if names.layout() == KeyLayout::Cluster {
                    let lock = names.lock_keys(key).unwrap();
                    assert_eq!(key_slot(lock.lock.as_bytes()), slot, "{key}");
                }
                let lines = [LeaseKind::Lock, LeaseKind::Permit]
                    .map(|kind| names.line_keys(key, kind).unwrap());
                assert_ne!(lines[0], lines[1]);
                for line in &lines {
                    for name in [&line.order, &line.expiry, &line.places] {
                        assert_eq!(key_slot(name.as_bytes()), slot, "{name}");
                        assert!(name.len() <= STORAGE_KEY_LIMIT, "{name}");
                        assert!(name.starts_with("syncguard{"), "{name}");
                        assert!(!name.ends_with('}'), "{name}");
                        assert!(![&sem.holders, &sem.permits, &sem.fence].contains(&name));
                        assert!(!name.ends_with(":permits"), "listed as a semaphore: {name}");
                    }
                }
            }
        }
        assert_eq!(
            keys(KeyLayout::TypeScript)
                .line_keys("job", LeaseKind::Lock)
                .unwrap()
                .order,
            "syncguard{job}:line:order"
        );
    }

    #[test]
    fn cluster_prefixes_have_no_braces() {
        for prefix in ["a{b", "a}b"] {
            assert!(Keys::new(prefix.to_owned(), KeyLayout::Cluster).is_err());
            assert!(Keys::new(prefix.to_owned(), KeyLayout::TypeScript).is_ok());
        }
    }

    #[test]
    fn prefixes() {
        let check = |prefix: &str| validate_prefix(prefix, "key_prefix");
        assert_eq!(check("syncguard").unwrap(), "syncguard");
        assert_eq!(check("app:").unwrap(), "app");
        assert!(check(&"p".repeat(948)).is_ok());
        assert!(check(&"p".repeat(949)).is_err());
        for overlapping in ["id", "fence", "app:id", "app:fence", "app:fence:"] {
            assert!(check(overlapping).is_err(), "{overlapping}");
        }
        assert!(check("app:fences").is_ok());
        assert!(check("a\nb").is_err());
        for empty in ["", ":", " "] {
            assert!(check(empty).is_err(), "{empty:?}");
        }
    }

    #[test]
    fn index_keys_are_what_make_storage_key_gives() {
        for prefix in ["syncguard", "p", &"p".repeat(948)] {
            let id = crate::driver::generate_lock_id();
            let expected = make_storage_key(
                prefix,
                &format!("id:{id}"),
                STORAGE_KEY_LIMIT,
                STORAGE_KEY_RESERVE,
            )
            .unwrap();
            assert_eq!(format!("{prefix}:id:{id}"), expected);
        }
    }
}
