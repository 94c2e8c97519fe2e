//! The observer the contracts attach to a `Locker`: it keeps every event, by raw key, for the
//! test to look at; and one that panics on every event.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::ErrorCode;
use crate::observe::{
    Acquired, Broke, Detached, Kind, LockObserver, Lost, NotAcquired, Refusal, Release, Released,
    RenewalFailed, Renewed, Subject,
};

/// One event as [`EventLog`] keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// [`LockObserver::acquired`].
    Acquired {
        /// What was acquired.
        kind: Kind,
        /// From the call to the acquisition.
        wait: Duration,
        /// Attempts sent, the successful one included.
        attempts: u32,
        /// The fence's value.
        fence: u64,
    },
    /// [`LockObserver::not_acquired`].
    NotAcquired {
        /// What was asked for.
        kind: Kind,
        /// Why not.
        why: Refusal,
    },
    /// [`LockObserver::renewed`].
    Renewed,
    /// [`LockObserver::renewal_failed`].
    RenewalFailed {
        /// What the failure was.
        code: ErrorCode,
    },
    /// [`LockObserver::lost`].
    Lost {
        /// A renewal found it gone.
        by_renewal: bool,
    },
    /// [`LockObserver::released`].
    Released {
        /// What was released.
        kind: Kind,
        /// What the release came to.
        how: Release,
        /// It had been lost before.
        after_loss: bool,
    },
    /// [`LockObserver::detached`].
    Detached,
    /// [`LockObserver::broken`].
    Broken {
        /// What was broken.
        kind: Kind,
        /// The broken holders' fences' values, in order.
        fences: Vec<u64>,
        /// Markers were left.
        kept: bool,
    },
}

/// Keeps every event with the raw key it is about (it asks for raw keys; a credential-like key
/// is kept as `None`).
#[derive(Debug, Default)]
pub struct EventLog {
    events: Mutex<Vec<(Option<String>, Seen)>>,
}

impl EventLog {
    /// The events about `key`, in order.
    pub fn of(&self, key: &str) -> Vec<Seen> {
        self.all()
            .into_iter()
            .filter(|(k, _)| k.as_deref() == Some(key))
            .map(|(_, seen)| seen)
            .collect()
    }

    /// How many events about `key` match `which`.
    pub fn count(&self, key: &str, which: impl Fn(&Seen) -> bool) -> usize {
        self.of(key).iter().filter(|seen| which(seen)).count()
    }

    /// Every event, with its raw key (`None`: redacted).
    pub fn all(&self) -> Vec<(Option<String>, Seen)> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn keep(&self, subject: &Subject<'_>, seen: Seen) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((subject.raw_key().map(str::to_owned), seen));
    }
}

impl LockObserver for EventLog {
    fn raw_keys(&self) -> bool {
        true
    }

    fn acquired(&self, event: &Acquired<'_>) {
        let seen = Seen::Acquired {
            kind: event.subject.kind(),
            wait: event.wait,
            attempts: event.attempts,
            fence: event.fence.value(),
        };
        self.keep(&event.subject, seen);
    }

    fn not_acquired(&self, event: &NotAcquired<'_>) {
        let seen = Seen::NotAcquired {
            kind: event.subject.kind(),
            why: event.why,
        };
        self.keep(&event.subject, seen);
    }

    fn renewed(&self, event: &Renewed<'_>) {
        self.keep(&event.subject, Seen::Renewed);
    }

    fn renewal_failed(&self, event: &RenewalFailed<'_>) {
        let seen = Seen::RenewalFailed { code: event.code };
        self.keep(&event.subject, seen);
    }

    fn lost(&self, event: &Lost<'_>) {
        let seen = Seen::Lost {
            by_renewal: event.by_renewal,
        };
        self.keep(&event.subject, seen);
    }

    fn released(&self, event: &Released<'_>) {
        let seen = Seen::Released {
            kind: event.subject.kind(),
            how: event.how,
            after_loss: event.after_loss,
        };
        self.keep(&event.subject, seen);
    }

    fn detached(&self, event: &Detached<'_>) {
        self.keep(&event.subject, Seen::Detached);
    }

    fn broken(&self, event: &Broke<'_>) {
        let seen = Seen::Broken {
            kind: event.subject.kind(),
            fences: event.fences.iter().map(|fence| fence.value()).collect(),
            kept: event.kept_until_ms.is_some(),
        };
        self.keep(&event.subject, seen);
    }
}

/// Panics on every event: attached to prove that an observer's panic changes nothing. It
/// unwinds without the panic hook, so that test output is not flooded with its messages.
#[derive(Debug, Default)]
pub struct Panicking;

impl Panicking {
    fn panic() -> ! {
        std::panic::resume_unwind(Box::new("an observer that panics"))
    }
}

impl LockObserver for Panicking {
    fn raw_keys(&self) -> bool {
        Self::panic()
    }

    fn acquired(&self, _: &Acquired<'_>) {
        Self::panic()
    }
}
