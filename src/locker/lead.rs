//! The leader loop ([`Locker::lead`]): campaign, run the caller's work while leading with a
//! token that is cancelled a margin before the lease could end, resign, and campaign again.
//!
//! A leadership is lost for sure only at its lease's local deadline (the send time of the last
//! confirmed renewal plus the TTL; the store's record lasts no less). The work is told earlier:
//! a watch thread cancels its token when the deadline is closer than the margin and no renewal
//! has moved it on, when a renewal finds the lease gone, or when the loop is told to stop — so
//! work that heeds its token has stopped before another leader can be elected.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use super::Locker;
use super::leadership::Leadership;
use super::options::Heartbeat;
use crate::cancel::{CancelToken, OnCancel};
use crate::driver::Driver;
use crate::error::{ErrorCode, LockError, Result};
use crate::holder::Holder;
use crate::key::Key;
use crate::time::Ttl;

/// How [`Locker::lead`] keeps its leadership. The setters chain.
///
/// | option | default |
/// |---|---|
/// | [`ttl`](LeadOptions::ttl) | 15 s |
/// | [`renew_every`](LeadOptions::renew_every) | a third of the TTL |
/// | [`margin`](LeadOptions::margin) | a third of the TTL |
/// | [`stop`](LeadOptions::stop) | a token nobody cancels |
///
/// The work's token is cancelled `margin` before the lease's local deadline unless a renewal
/// has moved the deadline on: renewals have `ttl − margin − renew_every` to be confirmed after
/// the one due, and the work has `margin` to stop before another campaigner can be elected.
#[derive(Debug, Clone)]
pub struct LeadOptions {
    ttl: Duration,
    renew_every: Option<Duration>,
    margin: Option<Duration>,
    stop: CancelToken,
}

impl Default for LeadOptions {
    fn default() -> Self {
        LeadOptions {
            ttl: Duration::from_secs(15),
            renew_every: None,
            margin: None,
            stop: CancelToken::new(),
        }
    }
}

impl LeadOptions {
    /// The leadership's lease: how long the name stays taken after the leader dies. A whole
    /// number of milliseconds, as [`LockOptions::ttl`](crate::LockOptions::ttl).
    #[must_use]
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = ttl;
        self
    }

    /// How often the heartbeat renews the lease (default: a third of the TTL).
    #[must_use]
    pub fn renew_every(mut self, every: Duration) -> Self {
        self.renew_every = Some(every);
        self
    }

    /// How long before the lease's local deadline the work's token is cancelled when no
    /// renewal has moved the deadline on (default: a third of the TTL): the time the work has
    /// to stop before another leader can be elected. `renew_every + margin` must be less than
    /// the TTL.
    #[must_use]
    pub fn margin(mut self, margin: Duration) -> Self {
        self.margin = Some(margin);
        self
    }

    /// Ends the loop: a campaign waiting ends, the work's token is cancelled, and once the work
    /// has returned the leadership is resigned and no new campaign begins.
    #[must_use]
    pub fn stop(mut self, stop: CancelToken) -> Self {
        self.stop = stop;
        self
    }

    /// The renewal interval and the margin, checked against the TTL (`InvalidArgument`).
    fn checked(&self) -> Result<(Duration, Duration)> {
        let ttl = Ttl::new(self.ttl)?.as_duration();
        let renew_every = self.renew_every.unwrap_or(ttl / 3);
        let margin = self.margin.unwrap_or(ttl / 3);
        if renew_every.is_zero() || renew_every.saturating_add(margin) >= ttl {
            return Err(LockError::invalid_argument(format!(
                "a leader renews every {renew_every:?} and stops its work {margin:?} before its \
                 lease ends: their sum must be less than the ttl, {ttl:?}, and the renewals \
                 more often than never"
            )));
        }
        Ok((renew_every, margin))
    }
}

impl<B: Driver + 'static> Locker<B> {
    /// Leads the election `name` with `value` for as long as it is told to, in client-go's
    /// shape but blocking: campaigns (waiting until elected), runs `work` while leading, then
    /// resigns and campaigns again — until `options`' [`stop`](LeadOptions::stop) token is
    /// cancelled (`Ok(())`) or `work` fails (its error, after resigning).
    ///
    /// `work` gets the [`Leadership`] (its term, to fence what it writes) and a token cancelled
    /// [`margin`](LeadOptions::margin) before the lease could end when the leadership is being
    /// lost (no renewal confirmed in time, or a renewal found it gone), or when the loop is
    /// told to stop. It should return soon after: another leader may be elected once the lease
    /// ends. Errors of the store while campaigning are waited through, as [`lock`](Locker::lock)
    /// waits through them; any other ends the loop (as `E::from`). `name`, `value` and `options`
    /// are checked before any I/O.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::{CancelToken, LeadOptions, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let stop = CancelToken::new();
    /// let options = LeadOptions::default().ttl(Duration::from_secs(3)).stop(stop.clone());
    /// let mut terms = Vec::new();
    /// locker.lead("scheduler", "node-a", &options, |leadership, cancelled| {
    ///     terms.push(leadership.term());
    ///     if terms.len() == 2 {
    ///         stop.cancel(); // the second term is the last
    ///     }
    ///     // The leader's work: steps while `!cancelled.is_cancelled()`, each write fenced
    ///     // with `leadership.term()`.
    ///     Ok::<(), syncguard::LockError>(())
    /// })?;
    /// assert!(terms[1] > terms[0]);
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn lead<E>(
        &self,
        name: &str,
        value: &str,
        options: &LeadOptions,
        mut work: impl FnMut(&Leadership, &CancelToken) -> std::result::Result<(), E>,
    ) -> std::result::Result<(), E>
    where
        E: From<LockError>,
    {
        Key::new(name)?;
        Holder::new(value)?;
        let (renew_every, margin) = options.checked()?;
        let campaign = self
            .defaults()
            .clone()
            .ttl(options.ttl)
            .heartbeat(Heartbeat::Every(renew_every))
            .timeout(Duration::MAX)
            .max_retries(u32::MAX)
            .cancel(options.stop.clone());
        loop {
            if options.stop.is_cancelled() {
                return Ok(());
            }
            let leadership = match self.campaign_with(name, value, &campaign) {
                Ok(leadership) => leadership,
                Err(error) if error.code() == ErrorCode::Aborted && options.stop.is_cancelled() => {
                    return Ok(());
                }
                Err(error) => return Err(error.into()),
            };
            let worked = while_leading(&leadership, margin, &options.stop, |cancelled| {
                work(&leadership, cancelled)
            });
            if let Err(error) = leadership.resign() {
                log::warn!("syncguard: resigning the leadership of {name} failed: {error}");
            }
            worked?;
        }
    }
}

/// Runs `work` with a token cancelled when `leadership` is being lost or `stop` is cancelled:
/// a watch thread lives as long as `work` runs.
fn while_leading<T>(
    leadership: &Leadership,
    margin: Duration,
    stop: &CancelToken,
    work: impl FnOnce(&CancelToken) -> T,
) -> T {
    let cancelled = CancelToken::new();
    let watch = Arc::new(Watch::default());
    let woken: Arc<dyn OnCancel> = watch.clone();
    leadership.lost_token().notify(Arc::downgrade(&woken));
    stop.notify(Arc::downgrade(&woken));
    thread::scope(|scope| {
        scope.spawn(|| watch.until_lost(leadership, margin, stop, &cancelled));
        // Also when `work` panics: the watch thread must end for the scope to.
        let _done = Done(&watch);
        work(&cancelled)
    })
}

/// What the watch thread waits on: the work's end, a loss or a stop (woken), or the time.
#[derive(Default)]
struct Watch {
    state: Mutex<WatchState>,
    wake: Condvar,
}

#[derive(Default)]
struct WatchState {
    /// The work has returned (or unwound).
    done: bool,
    /// A loss or a stop was signalled since the watch last looked.
    woken: bool,
}

impl Watch {
    /// Cancels `cancelled` when `leadership` is lost, when its deadline is less than `margin`
    /// away, or when `stop` is cancelled; returns then, or when the work is done.
    fn until_lost(
        &self,
        leadership: &Leadership,
        margin: Duration,
        stop: &CancelToken,
        cancelled: &CancelToken,
    ) {
        loop {
            // Read without the state lock: `is_lost` may latch the loss and cancel the lost
            // token, whose listener (this watch) takes that lock. Read again at each wake: a
            // renewal moves the deadline on.
            let give_up_at = leadership.deadline().checked_sub(margin);
            let left = give_up_at.map_or(Duration::ZERO, |at| {
                at.saturating_duration_since(Instant::now())
            });
            if leadership.is_lost() || stop.is_cancelled() || left.is_zero() {
                cancelled.cancel();
                return;
            }
            let mut state = self.state();
            if !state.woken && !state.done {
                state = self
                    .wake
                    .wait_timeout(state, left)
                    .unwrap_or_else(PoisonError::into_inner)
                    .0;
            }
            if state.done {
                return;
            }
            state.woken = false;
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, WatchState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Wakes the watch to look again (`done`: for the last time).
    fn wake(&self, done: bool) {
        let mut state = self.state();
        state.woken = true;
        state.done |= done;
        self.wake.notify_all();
    }
}

impl OnCancel for Watch {
    fn cancelled(&self) {
        self.wake(false);
    }
}

/// Tells the watch the work is over when dropped.
struct Done<'a>(&'a Watch);

impl Drop for Done<'_> {
    fn drop(&mut self) {
        self.0.wake(true);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc;

    use super::*;
    use crate::{LockOptions, MemoryBackend};

    /// The watch may be the first to find the deadline passed (its process was paused past
    /// it, or it woke late): reading the loss then latches it and cancels the lost token,
    /// whose listener is the watch itself — which must not wait for itself. With no margin,
    /// the watch and the heartbeat's deadline check race for the first read at every term.
    #[test]
    fn a_watch_that_finds_the_deadline_passed_ends_the_work() {
        let locker = Locker::new(MemoryBackend::new());
        let options = LockOptions::default()
            .ttl(Duration::from_millis(20))
            .heartbeat(Heartbeat::Off);
        for _ in 0..20 {
            let leadership = locker.campaign_with("k", "v", &options).unwrap();
            let (ended, ending) = mpsc::channel();
            thread::spawn(move || {
                while_leading(
                    &leadership,
                    Duration::ZERO,
                    &CancelToken::new(),
                    |cancelled| {
                        while !cancelled.is_cancelled() {
                            thread::sleep(Duration::from_millis(1));
                        }
                    },
                );
                let _ = ended.send(());
            });
            ending
                .recv_timeout(Duration::from_secs(30))
                .expect("the watch ended the work");
        }
    }
}
