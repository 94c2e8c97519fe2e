//! An operator's forced release on a [`MemoryBackend`](super::MemoryBackend)'s state: every
//! live holder replaced by a marker ([`BreakOrder`]), under the one mutex.

use std::collections::HashMap;

use super::state::{Entry, State};
use crate::driver::{
    BreakOrder, Broken, LeaseKind, TIME_TOLERANCE_MS, is_live, is_marker, marker_expiry,
    marker_lock_id,
};
use crate::error::Result;
use crate::fence::Fence;

impl State {
    /// Breaks what `order` names at `now_ms`; answers the live holders removed and the
    /// markers put in their place.
    pub(super) fn break_holders(&mut self, order: &BreakOrder<'_>, now_ms: i64) -> Result<Broken> {
        let key = order.key.as_str();
        let wanted = |lock_id: &str| {
            !is_marker(lock_id) && order.lock_id.is_none_or(|id| id.as_str() == lock_id)
        };
        let mut broken = Broken::default();
        match order.kind {
            LeaseKind::Lock => {
                let Some(entry) = self.locks.get(key).filter(|e| wanted(&e.lock_id)) else {
                    return Ok(broken);
                };
                let live = is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS);
                let record = entry.record(key);
                self.keys_by_id.remove(&record.lock_id);
                self.locks.remove(key);
                if !live {
                    return Ok(broken);
                }
                if let Some(expires_at_ms) =
                    marker_expiry(order.delay, record.expires_at_ms, now_ms)
                {
                    let counter = self.fences.get(key).copied().unwrap_or(0) + 1;
                    let fence = Fence::from_counter(counter).map_err(|e| e.with_key(key))?;
                    self.fences.insert(key.to_owned(), counter);
                    let marker = marker(order, fence, expires_at_ms, now_ms);
                    self.keys_by_id
                        .insert(marker.lock_id.clone(), key.to_owned());
                    broken.markers.push(marker.record(key));
                    self.locks.insert(key.to_owned(), marker);
                }
                broken.holders.push(record);
            }
            LeaseKind::Permit | LeaseKind::Shared => {
                let mut fence_counter = match order.kind {
                    LeaseKind::Permit => self.semaphores.get(key).map_or(0, |s| s.fence),
                    _ => self.fences.get(key).copied().unwrap_or(0),
                };
                let Some(held) = self.held_by_id(order.key, order.kind) else {
                    return Ok(broken);
                };
                let taken: Vec<Entry> = take_where(held, |entry| wanted(&entry.lock_id));
                let mut taken: Vec<Entry> = (taken.into_iter())
                    .filter(|entry| is_live(entry.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
                    .collect();
                taken.sort_by_key(|entry| entry.fence);
                for entry in taken {
                    if let Some(expires_at_ms) =
                        marker_expiry(order.delay, entry.expires_at_ms, now_ms)
                    {
                        fence_counter += 1;
                        let fence =
                            Fence::from_counter(fence_counter).map_err(|e| e.with_key(key))?;
                        let marker = marker(order, fence, expires_at_ms, now_ms);
                        broken.markers.push(marker.record(key));
                        held.insert(marker.lock_id.clone(), marker);
                    }
                    broken.holders.push(entry.record(key));
                }
                match order.kind {
                    LeaseKind::Permit => {
                        if let Some(semaphore) = self.semaphores.get_mut(key) {
                            semaphore.fence = fence_counter;
                        }
                    }
                    _ => {
                        self.fences.insert(key.to_owned(), fence_counter);
                    }
                }
            }
        }
        Ok(broken)
    }
}

/// Removes and answers the entries of `held` that `pick` chooses.
fn take_where(held: &mut HashMap<String, Entry>, pick: impl Fn(&Entry) -> bool) -> Vec<Entry> {
    let ids: Vec<String> = (held.iter())
        .filter(|(_, entry)| pick(entry))
        .map(|(id, _)| id.clone())
        .collect();
    ids.iter().filter_map(|id| held.remove(id)).collect()
}

/// The marker a break leaves: a lease nobody holds, until `expires_at_ms`.
fn marker(order: &BreakOrder<'_>, fence: Fence, expires_at_ms: i64, now_ms: i64) -> Entry {
    Entry {
        lock_id: marker_lock_id().into_string(),
        expires_at_ms,
        acquired_at_ms: now_ms,
        fence,
        holder: Some(order.note.to_string()),
    }
}
