//! Breaking the holders kept many to a document (a semaphore's permits, a lock's shared
//! holders): what a break asks of such a document ([`BreakAsk`]), how it changes it
//! ([`SemaphoreDoc::break_holders`]), and how a break whose answer was lost is recognised
//! ([`was_applied`]). The break itself, in a transaction, is `breaking.rs`.

use super::semaphore_doc::{Permit, SemaphoreDoc};
use crate::driver::{
    BreakDelay, BreakOrder, Broken, Holder, is_marker, marker_expiry, marker_lock_id,
};
use crate::error::Result;
use crate::fence::Fence;

/// A [`BreakOrder`] for the holders kept many to a document, owned: a change waits for its
/// write in another thread's hands.
pub(super) struct BreakAsk {
    /// Only the holder granted under this lock id; `None`: every live one.
    pub(super) lock_id: Option<String>,
    pub(super) delay: BreakDelay,
    pub(super) note: Holder,
}

impl BreakAsk {
    pub(super) fn of(order: &BreakOrder<'_>) -> BreakAsk {
        BreakAsk {
            lock_id: order.lock_id.map(|id| id.as_str().to_owned()),
            delay: order.delay,
            note: order.note.clone(),
        }
    }

    /// Whether the holder under `lock_id` is one to break: never a marker.
    pub(super) fn picks(&self, lock_id: &str) -> bool {
        !is_marker(lock_id) && self.lock_id.as_deref().is_none_or(|id| id == lock_id)
    }

    /// The marker that takes the place of a holder, with `fence`, at `now_ms`.
    pub(super) fn marker(&self, fence: Fence, expires_at_ms: i64, now_ms: i64) -> Permit {
        Permit {
            lock_id: marker_lock_id().into_string(),
            fence,
            expires_at_ms,
            acquired_at_ms: now_ms,
            holder: Some(self.note.to_string()),
        }
    }
}

/// Whether the break `sent` by a commit whose answer was lost went through, by the lock ids
/// `stored` now: its markers are there; or, when it left none, none of its holders is.
pub(super) fn was_applied(sent: &Broken, stored: impl Fn(&str) -> bool) -> bool {
    if sent.markers.is_empty() {
        !sent.holders.iter().any(|holder| stored(&holder.lock_id))
    } else {
        sent.markers.iter().any(|marker| stored(&marker.lock_id))
    }
}

impl SemaphoreDoc {
    /// Breaks what `ask` names among the holders of this document (of `key`) at `now_ms`:
    /// the live ones replaced by markers, with the next fences of the document's counter, in
    /// fence order; the expired ones met removed and not answered. Whether it changed the
    /// document comes with the answer. A counter that would pass the limit changes nothing.
    pub(super) fn break_holders(
        &mut self,
        ask: &BreakAsk,
        now_ms: i64,
        key: &str,
    ) -> Result<(Broken, bool)> {
        let marked = match ask.delay {
            BreakDelay::None => 0,
            BreakDelay::RestOfLease | BreakDelay::For(_) => (self.permits.iter())
                .filter(|permit| ask.picks(&permit.lock_id) && permit.is_live(now_ms))
                .count() as u64,
        };
        // Checked before anything changes: a document another change of the same commit
        // writes must not lose holders to a break that fails.
        if marked > 0 {
            Fence::from_counter(self.counter.saturating_add(marked))
                .map_err(|e| e.with_key(key))?;
        }
        let (taken, kept): (Vec<Permit>, Vec<Permit>) = std::mem::take(&mut self.permits)
            .into_iter()
            .partition(|permit| ask.picks(&permit.lock_id));
        self.permits = kept;
        let changed = !taken.is_empty();
        let live = taken.into_iter().filter(|permit| permit.is_live(now_ms));
        let mut broken = Broken::default();
        for holder in live {
            if let Some(expires_at_ms) = marker_expiry(ask.delay, holder.expires_at_ms, now_ms) {
                self.counter += 1;
                let fence = Fence::from_counter(self.counter).map_err(|e| e.with_key(key))?;
                let marker = ask.marker(fence, expires_at_ms, now_ms);
                broken.markers.push(marker.record(key));
                self.permits.push(marker);
            }
            broken.holders.push(holder.record(key));
        }
        Ok((broken, changed))
    }
}
