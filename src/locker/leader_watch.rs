//! [`Locker::observe`]: an election followed as its leader changes, a [`Watch`] of the
//! election's lock read as leaders.

use std::time::Duration;

use super::Locker;
use super::leadership::Leader;
use super::watch::{KeyState, Watch};
use crate::backend::LockInfo;
use crate::cancel::CancelToken;
use crate::driver::Driver;
use crate::error::Result;

impl<B: Driver + 'static> Locker<B> {
    /// Follows the election `name`: a blocking iterator of its leaders, the first item the
    /// leader now (`None`: nobody), then one item each time the leader changes — another
    /// leader or term, a proclaimed value, or nobody (a resignation, an expiry, a break). A
    /// renewal is no change. It is [`watch`](Locker::watch) on the election's lock, so it never
    /// misses the latest leader and hears what a watch hears when (see [`Watch`]); it holds
    /// nothing and takes no place in line.
    pub fn observe(&self, name: &str) -> Result<LeaderWatch> {
        Ok(LeaderWatch {
            watch: self.watch(name)?,
            last: None,
        })
    }
}

/// The leaders of an election as they change: [`Locker::observe`].
pub struct LeaderWatch {
    watch: Watch,
    /// The leader last reported (value and term); `None` before the first item.
    last: Option<Option<(Option<String>, crate::fence::Fence)>>,
}

impl LeaderWatch {
    /// Ends the iteration when `cancel` is cancelled ([`Watch::with_cancel`]).
    #[must_use]
    pub fn with_cancel(mut self, cancel: CancelToken) -> Self {
        self.watch = self.watch.with_cancel(cancel);
        self
    }

    /// The next change of leader, waiting at most `timeout`: `None` when none came by then (or
    /// the watch was cancelled).
    pub fn next_timeout(&mut self, timeout: Duration) -> Option<Result<Option<Leader>>> {
        let deadline = std::time::Instant::now().checked_add(timeout);
        loop {
            let left = deadline.map_or(timeout, |at| {
                at.saturating_duration_since(std::time::Instant::now())
            });
            let state = self.watch.next_timeout(left)?;
            if let Some(changed) = self.changed(state) {
                return Some(changed);
            }
        }
    }

    /// `state` as a leader, when it is a change from the one reported last.
    fn changed(&mut self, state: Result<KeyState>) -> Option<Result<Option<Leader>>> {
        let leader = match state {
            Ok(KeyState::Held { holders }) => holders.first().map(leader_of),
            Ok(_) => None,
            Err(error) => return Some(Err(error)),
        };
        let now = leader.as_ref().map(|l| (l.value.clone(), l.term));
        if self.last.as_ref() == Some(&now) {
            return None;
        }
        self.last = Some(now);
        Some(Ok(leader))
    }
}

impl Iterator for LeaderWatch {
    type Item = Result<Option<Leader>>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let state = self.watch.next()?;
            if let Some(changed) = self.changed(state) {
                return Some(changed);
            }
        }
    }
}

/// The leader a holder of the election's lock is (a watch reports holders sanitised, with
/// their holder text, fence and times; a break's marker is reported as
/// [`KeyState::Broken`], never as a holder).
fn leader_of(holder: &LockInfo) -> Leader {
    Leader {
        value: holder.holder.clone(),
        term: holder.fence,
        since_ms: holder.acquired_at_ms,
        expires_at_ms: holder.expires_at_ms,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemoryBackend;

    #[test]
    fn each_change_of_leader_is_told_once() {
        let locker = Locker::new(MemoryBackend::new());
        let mut leaders = locker.observe("scheduler").unwrap();
        assert_eq!(leaders.next().unwrap().unwrap(), None, "nobody leads yet");
        let first = locker.campaign("scheduler", "node-a").unwrap();
        let seen = leaders.next().unwrap().unwrap().unwrap();
        assert_eq!(
            (seen.value.as_deref(), seen.term),
            (Some("node-a"), first.term())
        );
        first.proclaim("node-a:8080").unwrap();
        let seen = leaders.next().unwrap().unwrap().unwrap();
        assert_eq!(
            (seen.value.as_deref(), seen.term),
            (Some("node-a:8080"), first.term())
        );
        let term = first.term();
        first.resign().unwrap();
        assert_eq!(leaders.next().unwrap().unwrap(), None, "resigned");
        let second = locker.campaign("scheduler", "node-b").unwrap();
        let seen = leaders.next().unwrap().unwrap().unwrap();
        assert!(seen.term > term, "a new leader's term is higher");
        assert_eq!(seen.value.as_deref(), Some("node-b"));
        drop(second);
    }
}
