//! [`Locker::break_key`]: an operator's forced release of a key's live holders, whatever
//! their lock ids, with [`BreakOptions`] — what to break, who breaks it and why, and how long
//! the key then stays taken by a marker (the driver's rules: [`BreakOrder`]).

use std::path::Path;
use std::time::Duration;

use super::Locker;
use crate::driver::{BreakDelay, BreakNote, BreakOrder, Broken, Driver, LeaseKind};
use crate::error::{LockError, Result};
use crate::holder::Holder;
use crate::key::Key;
use crate::lock_id::LockId;
use crate::observe::Broke;
use crate::time::Ttl;

/// What [`Locker::break_key`] breaks and what it leaves: the kind of holder (the lock by
/// default; [`shared`](Self::shared) holders or [`permits`](Self::permits)), one holder only
/// ([`lock_id`](Self::lock_id)), who breaks it ([`by`](Self::by)) and why
/// ([`reason`](Self::reason)), and how long the broken holders' places stay taken
/// ([`delay`](Self::delay); default: the rest of each broken lease).
///
/// Nothing is checked when it is built; everything is checked at the call, before any I/O.
#[derive(Debug, Clone, Default)]
pub struct BreakOptions {
    kind: Option<LeaseKind>,
    lock_id: Option<String>,
    reason: Option<String>,
    by: Option<String>,
    delay: Delay,
}

/// The delay as given, checked at the call.
#[derive(Debug, Clone, Copy, Default)]
enum Delay {
    #[default]
    RestOfLease,
    For(Duration),
    None,
}

impl BreakOptions {
    /// Break the key's lock (its exclusive holder), with the defaults: the same as
    /// `BreakOptions::default()`.
    pub fn new() -> Self {
        Self::default()
    }

    /// Break the key's shared holders (its readers, [`RwLock::read`](crate::RwLock::read))
    /// instead of its lock.
    #[must_use]
    pub fn shared(mut self) -> Self {
        self.kind = Some(LeaseKind::Shared);
        self
    }

    /// Break the permits of the key's semaphore ([`Locker::semaphore`]) instead of its lock:
    /// all of them, or the one [`lock_id`](Self::lock_id) names.
    #[must_use]
    pub fn permits(mut self) -> Self {
        self.kind = Some(LeaseKind::Permit);
        self
    }

    /// Break only the holder granted under `lock_id` (for a lock: only while that lease still
    /// holds the key). Its shape is checked at the call (`InvalidArgument`).
    #[must_use]
    pub fn lock_id(mut self, lock_id: &str) -> Self {
        self.lock_id = Some(lock_id.to_owned());
        self
    }

    /// Why: stored in the markers' holder text and shown by lookups (and `syncguard status`)
    /// while the delay lasts ([`BreakNote::reason`]).
    #[must_use]
    pub fn reason(mut self, reason: impl Into<String>) -> Self {
        self.reason = Some(reason.into());
        self
    }

    /// Who breaks it ([`BreakNote::by`]; it must not contain `; reason: `). Default: the
    /// locker's [`holder`](crate::LockOptions::holder) description if it has one, else
    /// `HOST:PID PROGRAM` of this process.
    #[must_use]
    pub fn by(mut self, by: impl Into<String>) -> Self {
        self.by = Some(by.into());
        self
    }

    /// Keep each broken holder's place from anyone for `delay` after the break (Consul's
    /// lock-delay) instead of for the rest of the broken lease. A whole number of
    /// milliseconds, as a TTL is; `Duration::ZERO` is [`no_delay`](Self::no_delay).
    #[must_use]
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = if delay.is_zero() {
            Delay::None
        } else {
            Delay::For(delay)
        };
        self
    }

    /// Leave no marker: the key is free at once. Safe only when the broken holder is known to
    /// have stopped, or its writes are fenced: it learns of the break at its next renewal, and
    /// may still act until then.
    #[must_use]
    pub fn no_delay(mut self) -> Self {
        self.delay = Delay::None;
        self
    }

    /// Checks the options as [`Locker::break_key`] does, before any I/O: the lock id, the
    /// delay, and the note of who breaks it and why — with [`by`](Self::by), or this
    /// process's `HOST:PID PROGRAM` when it is not given (a locker's holder description, used
    /// instead when it has one, is checked at the call). For a program that takes its
    /// options from its user and wants to refuse bad ones before it connects.
    pub fn validate(&self) -> Result<()> {
        self.checked(None).map(drop)
    }

    /// The checks of [`validate`](Self::validate), with what the order is made of: the lock
    /// id, the delay and the note (by `default_by` when [`by`](Self::by) was not given).
    fn checked(&self, default_by: Option<&str>) -> Result<(Option<LockId>, BreakDelay, Holder)> {
        let lock_id = self.lock_id.as_deref().map(LockId::new).transpose()?;
        Ok((lock_id, self.checked_delay()?, self.note(default_by)?))
    }

    /// What to break: the lock unless told otherwise.
    fn kind(&self) -> LeaseKind {
        self.kind.unwrap_or(LeaseKind::Lock)
    }

    /// The delay, checked (`InvalidArgument`: not a whole number of milliseconds a TTL can be).
    fn checked_delay(&self) -> Result<BreakDelay> {
        Ok(match self.delay {
            Delay::RestOfLease => BreakDelay::RestOfLease,
            Delay::None => BreakDelay::None,
            Delay::For(delay) => BreakDelay::For(Ttl::new(delay).map_err(|error| {
                LockError::invalid_argument(format!("the break's delay: {}", error.message()))
            })?),
        })
    }

    /// The markers' holder text: the note of `by` (or `default_by`) and the reason, checked.
    fn note(&self, default_by: Option<&str>) -> Result<Holder> {
        let by = match (&self.by, default_by) {
            (Some(by), _) => by.clone(),
            (None, Some(holder)) => holder.to_owned(),
            (None, None) => this_process(),
        };
        BreakNote::new(by, self.reason.clone()).to_holder()
    }
}

/// `HOST:PID PROGRAM` of this process: who breaks a key when nobody said.
fn this_process() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|name| name.trim().to_owned())
        .filter(|name| !name.is_empty())
        .unwrap_or_else(|| "unknown-host".to_owned());
    let program = std::env::current_exe()
        .ok()
        .and_then(|path| {
            Path::new(&path)
                .file_name()
                .map(|name| name.to_string_lossy().into_owned())
        })
        .unwrap_or_else(|| "unknown-program".to_owned());
    format!("{host}:{} {program}", std::process::id())
}

impl<B: Driver + 'static> Locker<B> {
    /// Breaks `key`: removes its live holders of the kind `options` names (its lock by
    /// default), whatever their lock ids, in one atomic step of the store, and puts in each
    /// one's place a *marker* — a lease nobody holds, with the next fence of the key, the
    /// note of who broke it and why ([`BreakNote::of`] reads it back), and the delay as its
    /// lease (default: the rest of the broken lease). The broken holders learn at their next
    /// renewal: their guards report the loss ([`LockGuard::is_lost`](crate::LockGuard::is_lost),
    /// [`lost_token`](crate::LockGuard::lost_token)). The next grant of the key has a fence
    /// above the broken ones' and the markers'. A marker is never broken itself, and the key's
    /// line is left as it is.
    ///
    /// Answers what was broken ([`Broken::holders`], empty when nothing live was held: an
    /// expired holder, a free key, a key broken already) and the markers left. The locker's
    /// observers are told ([`LockObserver::broken`](crate::observe::LockObserver::broken)).
    /// `InvalidArgument` for a bad key, lock id, delay or note, before any I/O, and from a
    /// backend that cannot break locks.
    ///
    /// ```
    /// use std::time::Duration;
    /// use syncguard::driver::BreakNote;
    /// use syncguard::{BreakOptions, LockBackend, Locker, MemoryBackend};
    ///
    /// let locker = Locker::new(MemoryBackend::new());
    /// let hung = locker.lock("nightly-report")?;
    /// let options = BreakOptions::new()
    ///     .by("ops on call")
    ///     .reason("stuck since 02:00")
    ///     .delay(Duration::from_secs(60));
    /// let broken = locker.break_key("nightly-report", &options)?;
    /// assert_eq!(broken.holders[0].fence, *hung.fence());
    /// assert!(broken.markers[0].fence > *hung.fence());
    /// assert!(locker.try_lock("nightly-report")?.is_none(), "the marker holds it for 60 s");
    /// let marker = locker.backend().lookup_raw(syncguard::Lookup::Key("nightly-report"))?;
    /// let note = BreakNote::of(&broken.markers[0]).expect("a marker");
    /// assert_eq!((note.by.as_str(), note.reason.as_deref()), ("ops on call", Some("stuck since 02:00")));
    /// assert_eq!(marker.map(|m| m.info.fence), Some(broken.markers[0].fence));
    /// // Broken again: nothing live is held (a marker is never broken).
    /// assert!(locker.break_key("nightly-report", &options)?.holders.is_empty());
    /// # Ok::<(), syncguard::LockError>(())
    /// ```
    pub fn break_key(&self, key: &str, options: &BreakOptions) -> Result<Broken> {
        let key = Key::new(key)?;
        let (lock_id, delay, note) = options.checked(self.shared.defaults.holder.as_deref())?;
        let kind = options.kind();
        let order = BreakOrder {
            key: &key,
            kind,
            lock_id: lock_id.as_ref(),
            delay,
            note: &note,
        };
        let broken = self.shared.backend.break_leases(&order)?;
        if !broken.holders.is_empty() && broken.markers.is_empty() {
            // Free at once: this process's waiters need not wait for their next poll.
            self.shared.wakeups.released(key.as_str());
        }
        self.observers().emit(kind, &key, |observer, subject| {
            observer.broken(&Broke::new(subject, &broken));
        });
        Ok(broken)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{LockOptions, MemoryBackend};

    #[test]
    fn the_note_is_by_whom_it_says_else_the_lockers_holder_else_this_process() {
        let reason = BreakOptions::new().reason("hung");
        assert_eq!(
            reason.clone().by("ops").note(Some("svc")).unwrap().as_str(),
            "broken by ops; reason: hung"
        );
        assert_eq!(
            reason.note(Some("svc")).unwrap().as_str(),
            "broken by svc; reason: hung"
        );
        let own = BreakOptions::new().note(None).unwrap();
        let pid = format!(":{} ", std::process::id());
        assert!(own.as_str().contains(&pid), "{own:?}");
    }

    #[test]
    fn bad_input_is_refused_before_the_store_is_asked() {
        let locker = Locker::with_defaults(MemoryBackend::new(), LockOptions::default());
        let guard = locker.lock("k").unwrap();
        for (options, what) in [
            (BreakOptions::new().lock_id("bad"), "lock id"),
            (
                BreakOptions::new().delay(Duration::from_micros(1500)),
                "delay",
            ),
            (BreakOptions::new().reason("a\nb"), "reason"),
            (BreakOptions::new().by("a; reason: b"), "by"),
            (BreakOptions::new().reason("x".repeat(300)), "length"),
        ] {
            let error = locker.break_key("k", &options).unwrap_err();
            assert_eq!(error.code(), crate::ErrorCode::InvalidArgument, "{what}");
        }
        assert!(locker.break_key("", &BreakOptions::new()).is_err());
        assert!(!guard.is_lost() && locker.try_lock("k").unwrap().is_none());
        assert_eq!(
            BreakOptions::new()
                .delay(Duration::ZERO)
                .checked_delay()
                .unwrap(),
            BreakDelay::None
        );
    }
}
