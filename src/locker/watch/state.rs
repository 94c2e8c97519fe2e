//! What a [`Watch`](super::Watch) reports ([`KeyState`], [`BreakInfo`]) and how one read of
//! the key, compared with the one before, becomes a report ([`Seen`]).

use serde::Serialize;

use crate::backend::{LockInfo, LockInfoDebug};
use crate::driver::{BreakNote, LockRecord, is_marker};
use crate::fence::Fence;

/// A key's state, as a [`Watch`](super::Watch) reports it. Serialises as one JSON object
/// with a `"state"` field (`"held"`, `"free"`, `"released"`, `"expired"`, `"broken"`) and the
/// variant's fields in camelCase: what `syncguard watch` prints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "camelCase")]
#[non_exhaustive]
pub enum KeyState {
    /// Held: one holder for a lock, the live permits or shared holders in fence order, each
    /// with its holder text, fence and expiry (as read when the holders changed: a renewal
    /// that only moves an expiry is not a change). Sanitised: hashes only.
    Held {
        /// The live holders, in fence order.
        holders: Vec<LockInfo>,
    },
    /// Nothing is held, and nothing was seen held before: the first state of a free key.
    Free,
    /// The holders seen before are gone and nothing is held; at least one of them went before
    /// its expiry (or a release of the key was heard): given back, or broken with no delay.
    Released,
    /// The holders seen before are gone and nothing is held, all of them after their expiry:
    /// their leases ran out (for a broken key: the break's delay is over).
    Expired,
    /// Every live holder is a break's marker: an operator broke the key, and it stays taken by
    /// nobody until the break's delay ends.
    Broken(BreakInfo),
}

impl KeyState {
    /// Whether nothing holds the key in this state ([`Free`](KeyState::Free),
    /// [`Released`](KeyState::Released), [`Expired`](KeyState::Expired)).
    pub fn is_free(&self) -> bool {
        matches!(
            self,
            KeyState::Free | KeyState::Released | KeyState::Expired
        )
    }
}

/// Who broke a key, why, and until when it is kept from anyone: read from the break's marker
/// (see [`BreakNote`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct BreakInfo {
    /// The operator, as the break described it (`host:pid program` for the command).
    pub by: String,
    /// Why, when the break said.
    pub reason: Option<String>,
    /// When the key was broken, Unix ms of the store's time authority.
    pub at_ms: i64,
    /// When the break's delay ends and the key can be taken again.
    pub until_ms: i64,
    /// The marker's fence: above the broken holder's, below the next grant's.
    pub fence: Fence,
}

impl BreakInfo {
    /// The break `marker` records; `None` when it is not a break's marker.
    fn of(marker: &LockRecord) -> Option<BreakInfo> {
        let note = BreakNote::of(marker)?;
        Some(BreakInfo {
            by: note.by,
            reason: note.reason,
            at_ms: marker.acquired_at_ms,
            until_ms: marker.expires_at_ms,
            fence: marker.fence,
        })
    }
}

/// The key's holders as last read, to tell what the next read changed.
#[derive(Debug, Default)]
pub(super) struct Seen {
    /// The last read's live records; `None` before the first read.
    holders: Option<Vec<LockRecord>>,
}

impl Seen {
    /// Takes the records of a new read, `now_ms` on the client clock; `released_heard` says
    /// whether a release of the key was announced since the read before. Answers the state to
    /// report, or `None` when the holders are the same ones (their expiries may have moved).
    pub(super) fn read(
        &mut self,
        found: Vec<LockRecord>,
        now_ms: i64,
        released_heard: bool,
    ) -> Option<KeyState> {
        let before = self.holders.replace(found);
        let found = self.holders.as_deref().unwrap_or_default();
        let Some(before) = before else {
            return Some(held(found).unwrap_or(KeyState::Free));
        };
        if same_holders(&before, found) {
            return None;
        }
        Some(held(found).unwrap_or_else(|| {
            if released_heard || before.iter().any(|gone| now_ms < gone.expires_at_ms) {
                KeyState::Released
            } else {
                KeyState::Expired
            }
        }))
    }

    /// Whether the last read found nothing held.
    pub(super) fn is_free(&self) -> bool {
        self.holders.as_ref().is_some_and(Vec::is_empty)
    }

    /// The earliest expiry among the holders last read (client clock, as stored).
    pub(super) fn earliest_expiry_ms(&self) -> Option<i64> {
        self.holders
            .iter()
            .flatten()
            .map(|record| record.expires_at_ms)
            .min()
    }
}

/// The state `found` (live records in fence order) shows; `None` when nothing is held.
fn held(found: &[LockRecord]) -> Option<KeyState> {
    let last = found.last()?;
    if found.iter().all(|record| is_marker(&record.lock_id))
        && let Some(info) = BreakInfo::of(last)
    {
        return Some(KeyState::Broken(info));
    }
    Some(KeyState::Held {
        holders: found
            .iter()
            .map(|record| LockInfoDebug::from(record.clone()).info)
            .collect(),
    })
}

/// Whether two reads found the same holders with the same holder texts: a renewal moves only
/// an expiry, and is no change; a new holder, a gone one, or a proclaimed holder text is.
fn same_holders(before: &[LockRecord], now: &[LockRecord]) -> bool {
    before.len() == now.len()
        && before
            .iter()
            .zip(now)
            .all(|(a, b)| a.lock_id == b.lock_id && a.fence == b.fence && a.holder == b.holder)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::{BreakNote, generate_lock_id, marker_lock_id};

    fn record(fence: u64, expires_at_ms: i64) -> LockRecord {
        LockRecord {
            key: "k".into(),
            lock_id: generate_lock_id(),
            expires_at_ms,
            acquired_at_ms: expires_at_ms - 10_000,
            fence: Fence::from_counter(fence).unwrap(),
            holder: Some("host:1 job".into()),
        }
    }

    #[test]
    fn a_read_reports_only_changes_and_tells_a_release_from_an_expiry() {
        let mut seen = Seen::default();
        assert_eq!(seen.read(vec![], 0, false), Some(KeyState::Free));
        assert!(seen.is_free());
        assert_eq!(seen.read(vec![], 0, false), None, "still free");
        let first = record(1, 20_000);
        let state = seen.read(vec![first.clone()], 10_000, false).unwrap();
        assert!(matches!(&state, KeyState::Held { holders } if holders[0].fence == first.fence));
        let renewed = LockRecord {
            expires_at_ms: 40_000,
            ..first.clone()
        };
        assert_eq!(seen.read(vec![renewed.clone()], 11_000, false), None);
        assert_eq!(seen.earliest_expiry_ms(), Some(40_000));
        let proclaimed = LockRecord {
            holder: Some("new value".into()),
            ..renewed
        };
        assert!(seen.read(vec![proclaimed], 12_000, false).is_some());
        assert_eq!(seen.read(vec![], 13_000, false), Some(KeyState::Released));
        seen.read(vec![record(2, 20_000)], 14_000, false);
        assert_eq!(seen.read(vec![], 21_000, false), Some(KeyState::Expired));
        seen.read(vec![record(3, 30_000)], 22_000, false);
        assert_eq!(
            seen.read(vec![], 31_000, true),
            Some(KeyState::Released),
            "a release heard is a release, late or not"
        );
    }

    #[test]
    fn a_key_held_only_by_markers_is_broken() {
        let note = BreakNote::new("ops:1 syncguard", Some("hung".into()));
        let marker = LockRecord {
            lock_id: marker_lock_id().into_string(),
            holder: Some(note.to_holder().unwrap().to_string()),
            ..record(5, 9_000)
        };
        let mut seen = Seen::default();
        let state = seen.read(vec![marker.clone()], 0, false).unwrap();
        assert_eq!(
            state,
            KeyState::Broken(BreakInfo {
                by: "ops:1 syncguard".into(),
                reason: Some("hung".into()),
                at_ms: marker.acquired_at_ms,
                until_ms: 9_000,
                fence: marker.fence,
            })
        );
        let json = serde_json::to_value(&state).unwrap();
        assert_eq!(json["state"], "broken");
        assert_eq!(json["untilMs"], 9_000);
        let beside = seen.read(vec![marker, record(6, 9_000)], 0, false).unwrap();
        assert!(
            matches!(beside, KeyState::Held { holders } if holders.len() == 2),
            "a permit broken beside live ones shows among the holders"
        );
        assert_eq!(seen.read(vec![], 10_000, false), Some(KeyState::Expired));
        assert_eq!(
            serde_json::to_string(&KeyState::Free).unwrap(),
            r#"{"state":"free"}"#
        );
    }
}
