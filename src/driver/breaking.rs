//! An operator's forced release ([`BreakOrder`]), what it did ([`Broken`]) and the marker
//! leases that keep a broken key from anyone for a while ([`BreakNote`], [`is_marker`]).
//!
//! A break replaces each live holder it removes by a *marker*: a lease of the same kind, held
//! by nobody (its lock id is one no acquisition draws, see [`marker_lock_id`]), with the next
//! fence of the key's sequence, the operator's [`BreakNote`] as its holder text, and the
//! break's delay as its TTL. To every client — the TypeScript SyncGuard included — a marker is
//! an ordinary live record: the key stays taken until it expires, so the broken holder stops
//! (it learns at its next renewal) before anyone else starts, and no client ever reads a
//! half-broken record. The next grant's fence is above the marker's, above the broken one's.

use super::lease::LeaseKind;
use super::records::LockRecord;
use crate::error::{LockError, Result};
use crate::holder::Holder;
use crate::key::Key;
use crate::lock_id::LockId;
use crate::time::Ttl;

/// What [`Driver::break_leases`](crate::driver::Driver::break_leases) removes, and what it
/// leaves in its place.
#[derive(Debug, Clone, Copy)]
pub struct BreakOrder<'a> {
    /// The key whose holders are removed.
    pub key: &'a Key,
    /// Its lock (`Lock`), its shared holders (`Shared`) or its semaphore's permits (`Permit`).
    pub kind: LeaseKind,
    /// Only the holder granted under this lock id; `None`: every live holder of `kind`.
    pub lock_id: Option<&'a LockId>,
    /// How long each removed holder's place stays taken by a marker.
    pub delay: BreakDelay,
    /// The markers' holder text: who broke the key and why ([`BreakNote::to_holder`]).
    pub note: &'a Holder,
}

/// How long a break keeps each broken holder's place from anyone ([`BreakOrder::delay`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BreakDelay {
    /// Until the broken lease would have expired: the holder's own deadline, by which it has
    /// heard of the break at a renewal or lost its lease anyway. The default.
    #[default]
    RestOfLease,
    /// For this long from the break.
    For(Ttl),
    /// No marker: the key is free at once.
    None,
}

/// What a break did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Broken {
    /// The live holders removed, as they were stored (lock id, fence, expiry, holder text).
    /// Empty: nothing live was held (an expired holder is removed and not counted; a marker
    /// of an earlier break is never broken again).
    pub holders: Vec<LockRecord>,
    /// The markers written in their place, one per holder removed (none when the delay is
    /// [`BreakDelay::None`]).
    pub markers: Vec<LockRecord>,
}

/// The last character of a marker's lock id. A drawn lock id encodes 16 bytes in 22
/// characters, so its last character carries 2 bits and is one of `A Q g w`: no acquisition
/// ever draws an id ending in `-`.
const MARKER_LAST_CHAR: char = '-';

/// A fresh lock id for a marker: 21 random characters and a final `-`, which no drawn lock id
/// has ([`is_marker`]).
pub fn marker_lock_id() -> LockId {
    let drawn = LockId::generate().into_string();
    let mut id: String = drawn.chars().take(drawn.len() - 1).collect();
    id.push(MARKER_LAST_CHAR);
    // Still 22 base64url characters: valid by construction.
    LockId::new(&id).unwrap_or_else(|_| LockId::generate())
}

/// Whether `lock_id` is a break's marker ([`marker_lock_id`]).
pub fn is_marker(lock_id: &str) -> bool {
    lock_id.len() == crate::lock_id::LOCK_ID_LENGTH && lock_id.ends_with(MARKER_LAST_CHAR)
}

/// Who broke a key and why: stored as a marker's holder text (`broken by BY` or `broken by
/// BY; reason: REASON`), which any client shows as it is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BreakNote {
    /// The operator, as described (`host:pid program` for the command).
    pub by: String,
    /// Why, when given.
    pub reason: Option<String>,
}

const NOTE_PREFIX: &str = "broken by ";
const REASON_SEPARATOR: &str = "; reason: ";

impl BreakNote {
    /// A note by `by`, with an optional `reason`.
    pub fn new(by: impl Into<String>, reason: Option<String>) -> Self {
        BreakNote {
            by: by.into(),
            reason,
        }
    }

    /// The note as a marker's holder text (`InvalidArgument` when it does not fit in a
    /// [`Holder`], or `by` contains the reason separator `; reason: `).
    pub fn to_holder(&self) -> Result<Holder> {
        if self.by.contains(REASON_SEPARATOR) {
            return Err(LockError::invalid_argument(
                "the breaker's description must not contain \"; reason: \"",
            ));
        }
        let text = match &self.reason {
            Some(reason) => format!("{NOTE_PREFIX}{}{REASON_SEPARATOR}{reason}", self.by),
            None => format!("{NOTE_PREFIX}{}", self.by),
        };
        Holder::new(text).map_err(|e| {
            LockError::invalid_argument(format!("a break's reason and author: {}", e.message()))
        })
    }

    /// The note of `record` when it is a break's marker; `None` for any other lease.
    pub fn of(record: &LockRecord) -> Option<BreakNote> {
        if !is_marker(&record.lock_id) {
            return None;
        }
        let text = record.holder.as_deref()?.strip_prefix(NOTE_PREFIX)?;
        Some(match text.split_once(REASON_SEPARATOR) {
            Some((by, reason)) => BreakNote::new(by, Some(reason.to_owned())),
            None => BreakNote::new(text, None),
        })
    }
}

/// The expiry of the marker that takes the place of `holder`, broken at `now_ms` (`None`: no
/// marker). Every store computes it so, with its own time authority's `now_ms`.
pub fn marker_expiry(delay: BreakDelay, holder_expires_at_ms: i64, now_ms: i64) -> Option<i64> {
    match delay {
        BreakDelay::None => None,
        BreakDelay::For(ttl) => Some(now_ms.saturating_add(ttl.as_millis())),
        BreakDelay::RestOfLease => Some(holder_expires_at_ms.max(now_ms.saturating_add(1))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fence::Fence;

    #[test]
    fn no_drawn_lock_id_is_a_marker_and_every_marker_is_valid() {
        for _ in 0..10_000 {
            assert!(!is_marker(LockId::generate().as_str()));
            let marker = marker_lock_id();
            assert!(is_marker(marker.as_str()));
            crate::lock_id::validate_lock_id(marker.as_str()).unwrap();
        }
    }

    #[test]
    fn a_note_reads_back_from_its_marker_only() {
        let note = BreakNote::new("ops-1:77 syncguard", Some("hung: pid 4242; stuck".into()));
        let holder = note.to_holder().unwrap();
        assert_eq!(
            holder.as_str(),
            "broken by ops-1:77 syncguard; reason: hung: pid 4242; stuck"
        );
        let mut record = LockRecord {
            key: "k".into(),
            lock_id: marker_lock_id().into_string(),
            expires_at_ms: 2,
            acquired_at_ms: 1,
            fence: Fence::from_counter(1).unwrap(),
            holder: Some(holder.to_string()),
        };
        assert_eq!(BreakNote::of(&record), Some(note));
        let bare = BreakNote::new("ops", None);
        record.holder = Some(bare.to_holder().unwrap().to_string());
        assert_eq!(BreakNote::of(&record), Some(bare));
        record.lock_id = LockId::generate().into_string();
        assert_eq!(BreakNote::of(&record), None, "a lease that only says so");
        assert!(BreakNote::new("a; reason: b", None).to_holder().is_err());
        assert!(
            BreakNote::new("ops", Some("x".repeat(300)))
                .to_holder()
                .is_err()
        );
    }

    #[test]
    fn a_marker_lasts_the_delay_or_the_rest_of_the_lease() {
        let ttl = Ttl::new(std::time::Duration::from_millis(5_000)).unwrap();
        assert_eq!(
            marker_expiry(BreakDelay::For(ttl), 9_000, 1_000),
            Some(6_000)
        );
        assert_eq!(
            marker_expiry(BreakDelay::RestOfLease, 9_000, 1_000),
            Some(9_000)
        );
        assert_eq!(
            marker_expiry(BreakDelay::RestOfLease, 500, 1_000),
            Some(1_001)
        );
        assert_eq!(marker_expiry(BreakDelay::None, 9_000, 1_000), None);
    }
}
