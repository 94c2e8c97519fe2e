//! The one acquisition a store is asked for ([`Request`]: keys, [`Mode`], TTL, holder, line)
//! and what it answers ([`Acquisitions`]).

use std::fmt;

use super::lease::{Lease, LeaseKind, Version};
use crate::fence::Fence;
use crate::holder::Holder;
use crate::key::Key;
use crate::key_set::KeySet;
use crate::line::Line;
use crate::permits::Permits;
use crate::time::Ttl;

/// How a lease holds its key: what an acquisition asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Mode {
    /// The key's lock, held by one holder at a time.
    Exclusive,
    /// A shared hold of the key's lock (a reader): any number at once, none beside an
    /// exclusive holder. Each is a lease of its own, with a fence from the lock's counter (so
    /// fences order every grant of the key), stored beside the lock record in this crate's
    /// layout only (the TypeScript SyncGuard sees exclusive records alone). A store with shared
    /// holds refuses an exclusive acquisition while a live shared holder exists, in the round
    /// trip it makes anyway. In line, a shared waiter is granted when no exclusive holder is
    /// live and no exclusive place is ahead of it ([`Places::admit`](crate::driver::Places::admit)).
    Shared,
    /// One of the permits of the key's semaphore, which is stored apart from the key's lock:
    /// its own records and its own fence sequence (a semaphore of one permit on `"k"` and the
    /// lock on `"k"` are two things). Permits held past their expiry (and the tolerance) are
    /// reclaimed by the acquisition; each acquisition is judged by its own count
    /// ([`Permits`]). In line, the first in line takes the next free permit.
    Permit(Permits),
}

impl Mode {
    /// One of `permits` permits of a semaphore (`InvalidArgument` unless 1 to
    /// [`MAX_PERMITS`](crate::driver::MAX_PERMITS)).
    pub fn permits(permits: u32) -> crate::error::Result<Mode> {
        Permits::new(permits).map(Mode::Permit)
    }

    /// The kind of lease this mode grants.
    pub fn kind(self) -> LeaseKind {
        match self {
            Mode::Exclusive => LeaseKind::Lock,
            Mode::Shared => LeaseKind::Shared,
            Mode::Permit(_) => LeaseKind::Permit,
        }
    }

    /// For messages: what is being acquired.
    pub fn what(self) -> String {
        match self {
            Mode::Exclusive => "the lock".to_owned(),
            Mode::Permit(permits) => format!("a permit of the semaphore ({permits} permits)"),
            Mode::Shared => "a shared hold of the lock".to_owned(),
        }
    }
}

/// One acquisition: the keys (one, or a [`KeySet`] taken all or none), the [`Mode`], the TTL,
/// the holder's description and how the keys' lines are heeded ([`Line`]). Built with
/// [`one`](Request::one) or [`all`](Request::all), then the builder methods; an exclusive
/// lock with [`Line::Keep`] and no holder unless they say otherwise.
///
/// ```
/// use std::time::Duration;
/// use syncguard::driver::{Acquisitions, Driver, Key, Line, Mode, Permits, Request, Ttl};
/// use syncguard::MemoryBackend;
///
/// let store = MemoryBackend::new();
/// let key = Key::new("export")?;
/// let ttl = Ttl::new(Duration::from_secs(30))?;
/// let two_permits = Request::one(&key, ttl).mode(Mode::Permit(Permits::new(2)?));
/// assert!(matches!(store.try_acquire(&two_permits)?, Acquisitions::Acquired(_)));
/// assert!(matches!(store.try_acquire(&two_permits)?, Acquisitions::Acquired(_)));
/// assert!(matches!(
///     store.try_acquire(&two_permits.line(Line::Ignore))?,
///     Acquisitions::Locked { .. }
/// ));
/// # Ok::<(), syncguard::LockError>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request<'a> {
    keys: &'a [Key],
    /// What is asked for on each key.
    pub mode: Mode,
    /// How long each lease lives unless renewed.
    pub ttl: Ttl,
    /// Stored with each lease and answered by [`find`](crate::driver::Driver::find) for as
    /// long as it lives (never for a later lease on the key).
    pub holder: Option<&'a Holder>,
    /// How the keys' lines are heeded.
    pub line: Line<'a>,
}

impl<'a> Request<'a> {
    /// The exclusive lock on `key` for `ttl`.
    pub fn one(key: &'a Key, ttl: Ttl) -> Self {
        Request::of(std::slice::from_ref(key), ttl)
    }

    /// The exclusive locks on every key of `keys` for `ttl`, all or none.
    pub fn all(keys: &'a KeySet, ttl: Ttl) -> Self {
        Request::of(keys.as_slice(), ttl)
    }

    fn of(keys: &'a [Key], ttl: Ttl) -> Self {
        Request {
            keys,
            mode: Mode::Exclusive,
            ttl,
            holder: None,
            line: Line::Keep,
        }
    }

    /// This request in `mode`.
    #[must_use]
    pub fn mode(self, mode: Mode) -> Self {
        Request { mode, ..self }
    }

    /// This request with `holder` stored with each lease.
    #[must_use]
    pub fn holder(self, holder: Option<&'a Holder>) -> Self {
        Request { holder, ..self }
    }

    /// This request, heeding the lines as `line` says.
    #[must_use]
    pub fn line(self, line: Line<'a>) -> Self {
        Request { line, ..self }
    }

    /// The same request for `key` alone (one of a set's keys, when a store takes them one at a
    /// time).
    #[must_use]
    pub fn for_key(self, key: &'a Key) -> Self {
        Request {
            keys: std::slice::from_ref(key),
            ..self
        }
    }

    /// The keys: one, or 1 to [`MAX_KEYS`](crate::driver::MAX_KEYS) distinct ones in byte
    /// order.
    pub fn keys(&self) -> &'a [Key] {
        self.keys
    }

    /// The key, when the request is for one.
    pub fn key(&self) -> Option<&'a Key> {
        match self.keys {
            [key] => Some(key),
            _ => None,
        }
    }

    /// The first key: what errors of the whole request name.
    pub fn first_key(&self) -> &'a Key {
        // Both constructors give at least one key.
        &self.keys[0]
    }
}

impl fmt::Display for Request<'_> {
    /// What is asked for, on which keys, for messages.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} on ", self.mode.what())?;
        for (position, key) in self.keys.iter().enumerate() {
            if position > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{key}")?;
        }
        Ok(())
    }
}

/// A store's answer to a [`Request`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "acquired leases stay held until released or expired"]
pub enum Acquisitions {
    /// Every key is now held: a lease and the store's version of its record per key, in the
    /// order of the request's keys.
    Acquired(Vec<(Lease, Option<Version>)>),
    /// A key is held by someone else (or its line goes first): none is held for this request.
    Locked {
        /// The ticket of the waiter's places, when a waiter of several keys stands in line
        /// after this refusal: its next attempts ask [`Line::WaitAt`] with it. `None` when it
        /// took no place, and for one key (its place id is enough there).
        ticket: Option<u64>,
        /// How many live places stand ahead of the waiter's own (0: it is first), on the line
        /// where it stands furthest back; `None` when it took no place.
        position: Option<u64>,
    },
}

impl Acquisitions {
    /// The answer for one key, granted under `lock_id` with `fence` until `expires_at_ms`.
    pub fn granted(
        lock_id: String,
        fence: Fence,
        expires_at_ms: i64,
        version: Option<Version>,
    ) -> Self {
        let lease = Lease {
            lock_id,
            fence,
            expires_at_ms,
        };
        Acquisitions::Acquired(vec![(lease, version)])
    }

    /// A refusal of a request that stands in no line (or of one key, whose place id is
    /// enough), `position` places behind the first.
    pub fn locked_at(position: Option<u64>) -> Self {
        Acquisitions::Locked {
            ticket: None,
            position,
        }
    }
}

/// The answer for one key, as its callers see it: the lease or a refusal
/// ([`DriverExt::acquire_one`](crate::driver::DriverExt::acquire_one)).
#[derive(Debug, Clone, PartialEq, Eq)]
#[must_use = "an acquired lease stays held until released or expired"]
pub enum Acquisition {
    /// The lock is now held.
    Acquired {
        /// The lease, as a lock user sees it.
        lease: Lease,
        /// The store's version of the lock record, if it has one (a Firestore document's
        /// update time): given back in [`LeaseRef`](crate::driver::LeaseRef)s so the store
        /// can check it went unchanged.
        version: Option<Version>,
    },
    /// Someone else holds a live lock on the key (or its line goes first).
    Locked,
}
