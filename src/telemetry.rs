//! Opt-in observability: a decorator that reports every backend operation as a [`LockEvent`].

use std::fmt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

use serde::Serialize;

use crate::driver::{
    Acquisitions, BreakOrder, Broken, Driver, Extension, Find, KeyPrefix, LeaseKind, LeaseRef,
    ListLimit, LockId, LockList, LockRecord, Mode, Outcome, Request, Ttl,
};
use crate::error::{ErrorCode, Result};
use crate::hash::hash_key;
use crate::key::Key;

/// Key fragments that keep a key redacted even with [`TelemetryOptions::include_raw`]: such
/// keys tend to embed credentials.
const SENSITIVE_KEY_WORDS: [&str; 6] = [
    "token",
    "secret",
    "password",
    "passwd",
    "apikey",
    "credential",
];

/// Where telemetry events go, and whether they may carry raw identifiers.
#[derive(Clone)]
pub struct TelemetryOptions {
    /// Receives every event, on the thread that ran the operation, after it completed. Keep it
    /// cheap. A panic in it is caught and never affects the lock operation.
    pub on_event: Arc<dyn Fn(&LockEvent) + Send + Sync>,
    /// Include raw keys and lock ids in events (default `false`: hashes only). Keys that look
    /// like they embed credentials (`token`, `secret`, `password`, …) stay redacted regardless.
    pub include_raw: bool,
}

impl TelemetryOptions {
    /// Events to `on_event`, hashes only.
    pub fn new(on_event: impl Fn(&LockEvent) + Send + Sync + 'static) -> Self {
        TelemetryOptions {
            on_event: Arc::new(on_event),
            include_raw: false,
        }
    }

    /// Whether events carry raw keys and lock ids.
    #[must_use]
    pub fn include_raw(mut self, include_raw: bool) -> Self {
        self.include_raw = include_raw;
        self
    }
}

impl fmt::Debug for TelemetryOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TelemetryOptions")
            .field("include_raw", &self.include_raw)
            .finish_non_exhaustive()
    }
}

/// Which backend operation an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum LockOp {
    /// `acquire`
    Acquire,
    /// `release`
    Release,
    /// `extend`
    Extend,
    /// `is_locked`
    IsLocked,
    /// `lookup` (and `lookup_raw`)
    Lookup,
    /// `list` (and `list_raw`): events carry no key or lock id.
    List,
    /// Acquiring a permit of a semaphore (its release and extension are `Release` and
    /// `Extend`).
    AcquirePermit,
    /// Reading a semaphore's holders.
    Permits,
    /// Taking a shared hold of a lock (its release and extension are `Release` and `Extend`).
    AcquireShared,
    /// Reading a lock's shared holders.
    Readers,
    /// An operator's forced release ([`Locker::break_key`](crate::Locker::break_key)): `ok`
    /// when live holders were broken, `fail` with `not-found` when none was held. The lock id
    /// is the one the break named, if it named one.
    Break,
}

/// Whether the operation did what was asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventResult {
    /// Acquired, released, extended, found; `is_locked` always succeeds unless it errs.
    Ok,
    /// Contention, absent lock, nothing found, or an error.
    Fail,
}

/// Why an operation did not take effect, in the specification's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum FailureReason {
    /// Acquire: someone else holds the lock.
    Locked,
    /// Release/extend: the lock existed but had expired.
    Expired,
    /// Release/extend: no lock under that lock id.
    NotFound,
}

impl FailureReason {
    /// `"locked"`, `"expired"` or `"not-found"`, the specification's strings.
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Locked => "locked",
            FailureReason::Expired => "expired",
            FailureReason::NotFound => "not-found",
        }
    }
}

/// One backend operation, as reported to [`TelemetryOptions::on_event`].
/// Serialises to the camelCase shape of the TypeScript SyncGuard's events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
#[non_exhaustive]
pub struct LockEvent {
    /// The operation.
    #[serde(rename = "type")]
    pub op: LockOp,
    /// Whether it did what was asked.
    pub result: EventResult,
    /// Why not, when the backend could tell cheaply: `locked`, `expired` or `not-found`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<FailureReason>,
    /// The error code, when the operation failed with an error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<ErrorCode>,
    /// `hash_key(key)`, when the operation named a key.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key_hash: Option<String>,
    /// `hash_key(lock_id)`, when a lock id was given or obtained.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_id_hash: Option<String>,
    /// The raw key, only with `include_raw` (and never for credential-like keys).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// The raw lock id, only with `include_raw`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lock_id: Option<String>,
}

/// A backend that reports its operations; see [`with_telemetry`].
pub struct Telemetry<B> {
    inner: B,
    options: TelemetryOptions,
}

/// Wraps `backend` so that every operation it carries out is reported to `options.on_event`.
/// Hashes are computed only here, so an undecorated backend pays nothing for telemetry. Input
/// refused before it reaches the store (a malformed key or lock id) is not an operation and
/// produces no event.
///
/// ```
/// use std::sync::{Arc, Mutex};
/// use std::time::Duration;
/// use syncguard::{with_telemetry, LockBackend, MemoryBackend, TelemetryOptions};
///
/// let events = Arc::new(Mutex::new(Vec::new()));
/// let sink = Arc::clone(&events);
/// let backend = with_telemetry(
///     MemoryBackend::new(),
///     TelemetryOptions::new(move |e| sink.lock().unwrap().push(serde_json::to_string(e).unwrap())),
/// );
/// let _ = backend.acquire("job", Duration::from_secs(5))?;
/// assert!(events.lock().unwrap()[0].starts_with(r#"{"type":"acquire","result":"ok""#));
/// # Ok::<(), syncguard::LockError>(())
/// ```
pub fn with_telemetry<B: Driver>(backend: B, options: TelemetryOptions) -> Telemetry<B> {
    Telemetry {
        inner: backend,
        options,
    }
}

impl<B> Telemetry<B> {
    /// The wrapped backend.
    pub fn inner(&self) -> &B {
        &self.inner
    }

    fn emit(&self, op: LockOp, result: EventResult, reason: Option<FailureReason>, ids: Ids<'_>) {
        let include_raw = self.options.include_raw;
        let event = LockEvent {
            op,
            result,
            reason,
            error: ids.error,
            key_hash: ids.key.map(hash_key),
            lock_id_hash: ids.lock_id.map(hash_key),
            key: ids
                .key
                .filter(|key| include_raw && !looks_sensitive(key))
                .map(str::to_owned),
            lock_id: ids.lock_id.filter(|_| include_raw).map(str::to_owned),
        };
        if catch_unwind(AssertUnwindSafe(|| (self.options.on_event)(&event))).is_err() {
            log::error!("syncguard: a telemetry on_event callback panicked; event dropped");
        }
    }

    fn emit_result<T>(
        &self,
        op: LockOp,
        outcome: &Result<T>,
        ids: Ids<'_>,
        judge: impl FnOnce(&T) -> (EventResult, Option<FailureReason>),
    ) {
        match outcome {
            Ok(value) => {
                let (result, reason) = judge(value);
                self.emit(op, result, reason, ids);
            }
            Err(error) => self.emit(
                op,
                EventResult::Fail,
                None,
                Ids {
                    error: Some(error.code()),
                    ..ids
                },
            ),
        }
    }
}

#[derive(Clone, Copy, Default)]
struct Ids<'a> {
    key: Option<&'a str>,
    lock_id: Option<&'a str>,
    error: Option<ErrorCode>,
}

pub(crate) fn looks_sensitive(key: &str) -> bool {
    let lower = key.to_lowercase();
    SENSITIVE_KEY_WORDS.iter().any(|word| lower.contains(word))
}

fn mutation_result<T>(outcome: &Outcome<T>) -> (EventResult, Option<FailureReason>) {
    match outcome {
        Outcome::Applied(_) => (EventResult::Ok, None),
        Outcome::Expired => (EventResult::Fail, Some(FailureReason::Expired)),
        // The specification knows two reasons: another holder's lock is, for this lease, not
        // found.
        Outcome::NotFound | Outcome::NotOwner => (EventResult::Fail, Some(FailureReason::NotFound)),
    }
}

fn found(records: &[LockRecord]) -> (EventResult, Option<FailureReason>) {
    if records.is_empty() {
        (EventResult::Fail, None)
    } else {
        (EventResult::Ok, None)
    }
}

impl<B> Telemetry<B> {
    /// An acquisition reported per key, as each key's own acquisition would be: each granted,
    /// each refused, or each failed.
    fn emit_acquisitions(&self, request: &Request<'_>, outcome: &Result<Acquisitions>) {
        let op = match request.mode {
            Mode::Exclusive => LockOp::Acquire,
            Mode::Permit(_) => LockOp::AcquirePermit,
            Mode::Shared => LockOp::AcquireShared,
        };
        for (at, key) in request.keys().iter().enumerate() {
            let lock_id = match outcome {
                Ok(Acquisitions::Acquired(leases)) => {
                    leases.get(at).map(|(lease, _)| lease.lock_id.as_str())
                }
                _ => None,
            };
            let ids = Ids {
                key: Some(key.as_str()),
                lock_id,
                error: None,
            };
            self.emit_result(op, outcome, ids, |outcome| match outcome {
                Acquisitions::Acquired(_) => (EventResult::Ok, None),
                Acquisitions::Locked { .. } => (EventResult::Fail, Some(FailureReason::Locked)),
            });
        }
    }
}

fn lease_ids<'a>(lease: &LeaseRef<'a>) -> Ids<'a> {
    Ids {
        key: lease.key.map(Key::as_str),
        lock_id: Some(lease.lock_id.as_str()),
        error: None,
    }
}

impl<B: Driver> Driver for Telemetry<B> {
    fn try_acquire(&self, request: &Request<'_>) -> Result<Acquisitions> {
        // The holder description is never part of an event: events carry hashes only.
        let outcome = self.inner.try_acquire(request);
        self.emit_acquisitions(request, &outcome);
        outcome
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        let outcome = self.inner.release_lease(lease);
        self.emit_result(
            LockOp::Release,
            &outcome,
            lease_ids(&lease),
            mutation_result,
        );
        outcome
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        let outcomes = self.inner.extend_leases(leases);
        for ((lease, _), outcome) in leases.iter().zip(&outcomes) {
            self.emit_result(LockOp::Extend, outcome, lease_ids(lease), mutation_result);
        }
        outcomes
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let outcome = self.inner.key_is_locked(key);
        let ids = Ids {
            key: Some(key.as_str()),
            ..Ids::default()
        };
        self.emit_result(LockOp::IsLocked, &outcome, ids, |_| (EventResult::Ok, None));
        outcome
    }

    fn find(&self, by: Find<'_>) -> Result<Vec<LockRecord>> {
        let outcome = self.inner.find(by);
        let (op, ids) = match by {
            Find::Key(key, kind) => {
                let op = match kind {
                    LeaseKind::Lock => LockOp::Lookup,
                    LeaseKind::Permit => LockOp::Permits,
                    LeaseKind::Shared => LockOp::Readers,
                };
                let ids = Ids {
                    key: Some(key.as_str()),
                    ..Ids::default()
                };
                (op, ids)
            }
            Find::LockId(lock_id) => {
                let ids = Ids {
                    lock_id: Some(lock_id.as_str()),
                    ..Ids::default()
                };
                (LockOp::Lookup, ids)
            }
        };
        match op {
            // A lookup fails when nothing is found; who holds a semaphore or a lock shared is
            // answered, none or many.
            LockOp::Lookup => self.emit_result(op, &outcome, ids, |records| found(records)),
            _ => self.emit_result(op, &outcome, ids, |_| (EventResult::Ok, None)),
        }
        outcome
    }

    fn list_records(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
    ) -> Result<LockList<LockRecord>> {
        let outcome = self.inner.list_records(prefix, kind, limit);
        self.emit_result(LockOp::List, &outcome, Ids::default(), |_| {
            (EventResult::Ok, None)
        });
        outcome
    }

    fn break_leases(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        // The note (who broke it and why) is holder text: never part of an event.
        let outcome = self.inner.break_leases(order);
        let ids = Ids {
            key: Some(order.key.as_str()),
            lock_id: order.lock_id.map(LockId::as_str),
            error: None,
        };
        self.emit_result(LockOp::Break, &outcome, ids, |broken| {
            if broken.holders.is_empty() {
                (EventResult::Fail, Some(FailureReason::NotFound))
            } else {
                (EventResult::Ok, None)
            }
        });
        outcome
    }

    delegate_driver!(self, &self.inner; describe, find_line, leave_line, watch_releases);
}

impl<B: fmt::Debug> fmt::Debug for Telemetry<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Telemetry")
            .field("inner", &self.inner)
            .field("options", &self.options)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::*;
    use crate::MemoryBackend;
    use crate::backend::{AcquireOutcome, LockBackend};
    use crate::driver::{Acquisition, Capabilities, DriverExt as _, Holder};

    fn recorded(include_raw: bool) -> (Telemetry<MemoryBackend>, Arc<Mutex<Vec<LockEvent>>>) {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let options = TelemetryOptions::new(move |e| sink.lock().unwrap().push(e.clone()))
            .include_raw(include_raw);
        (with_telemetry(MemoryBackend::new(), options), events)
    }

    const TTL: Duration = Duration::from_secs(10);

    #[test]
    fn reports_reasons_and_hashes_only_by_default() {
        let (backend, events) = recorded(false);
        let lease = backend.acquire("job", TTL).unwrap().lease().unwrap();
        assert_eq!(backend.acquire("job", TTL).unwrap(), AcquireOutcome::Locked);
        assert!(backend.release(&lease.lock_id).unwrap());
        assert!(!backend.release(&lease.lock_id).unwrap());
        let events = events.lock().unwrap();
        let summary: Vec<_> = events.iter().map(|e| (e.op, e.result, e.reason)).collect();
        assert_eq!(
            summary,
            [
                (LockOp::Acquire, EventResult::Ok, None),
                (
                    LockOp::Acquire,
                    EventResult::Fail,
                    Some(FailureReason::Locked)
                ),
                (LockOp::Release, EventResult::Ok, None),
                (
                    LockOp::Release,
                    EventResult::Fail,
                    Some(FailureReason::NotFound)
                ),
            ]
        );
        assert_eq!(
            events[0].key_hash.as_deref(),
            Some(hash_key("job").as_str())
        );
        assert_eq!(events[0].lock_id_hash, Some(hash_key(&lease.lock_id)));
        assert!(
            events
                .iter()
                .all(|e| e.key.is_none() && e.lock_id.is_none())
        );
    }

    #[test]
    fn raw_ids_on_request_but_never_for_credential_keys() {
        let (backend, events) = recorded(true);
        let _ = backend.acquire("job", TTL).unwrap();
        let _ = backend.acquire("api-TOKEN:abc", TTL).unwrap();
        let events = events.lock().unwrap();
        assert_eq!(events[0].key.as_deref(), Some("job"));
        assert!(events[0].lock_id.is_some());
        assert_eq!(events[1].key, None);
        assert!(events[1].key_hash.is_some());
    }

    /// A holder description reaches the store and lookups, never an event (not even with raw
    /// identifiers on).
    #[test]
    fn holders_stay_out_of_events() {
        let (backend, events) = recorded(true);
        let holder = Holder::new("web-1:4242 ./nightly.sh").unwrap();
        let key = Key::new("job").unwrap();
        let ttl = Ttl::new(TTL).unwrap();
        let Acquisition::Acquired { lease, .. } = backend
            .acquire_one(&Request::one(&key, ttl).holder(Some(&holder)))
            .unwrap()
        else {
            panic!("free key");
        };
        let info = backend
            .lookup(crate::Lookup::LockId(&lease.lock_id))
            .unwrap()
            .unwrap();
        assert_eq!(info.holder.as_deref(), Some(holder.as_str()));
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 2);
        for event in events.iter() {
            let shown = format!("{event:?} {}", serde_json::to_string(event).unwrap());
            assert!(!shown.contains("web-1"), "{shown}");
        }
    }

    #[test]
    fn errors_are_reported_with_their_code() {
        let events = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&events);
        let backend = with_telemetry(
            Failing,
            TelemetryOptions::new(move |e| sink.lock().unwrap().push(e.clone())),
        );
        assert!(backend.acquire("job", TTL).is_err());
        let events = events.lock().unwrap();
        assert_eq!(events[0].error, Some(ErrorCode::ServiceUnavailable));
        assert_eq!(events[0].result, EventResult::Fail);
        assert_eq!(events[0].key_hash, Some(hash_key("job")));
    }

    #[test]
    fn listings_are_reported_without_identifiers() {
        let (backend, events) = recorded(true);
        let _ = backend.acquire("job", TTL).unwrap();
        assert_eq!(
            backend.list("j", LeaseKind::Lock, 10).unwrap().locks.len(),
            1
        );
        assert!(
            backend.list("j", LeaseKind::Lock, 0).is_err(),
            "refused before the driver"
        );
        let events = events.lock().unwrap();
        assert_eq!(events.len(), 2);
        let listed = &events[1];
        assert_eq!((listed.op, listed.result), (LockOp::List, EventResult::Ok));
        assert_eq!((&listed.key, &listed.key_hash), (&None, &None));
        assert_eq!((&listed.lock_id, &listed.lock_id_hash), (&None, &None));
    }

    /// A break is reported as one, with its key and the lock id it named; the note never.
    #[test]
    fn breaks_are_reported_and_their_note_is_not() {
        let (backend, events) = recorded(true);
        let key = Key::new("job").unwrap();
        let note = Holder::new("broken by ops-7; reason: hung").unwrap();
        let lease = backend.acquire("job", TTL).unwrap().lease().unwrap();
        let mut order = BreakOrder {
            key: &key,
            kind: LeaseKind::Lock,
            lock_id: None,
            delay: crate::driver::BreakDelay::None,
            note: &note,
        };
        assert_eq!(backend.break_leases(&order).unwrap().holders.len(), 1);
        let named = LockId::new(&lease.lock_id).unwrap();
        order.lock_id = Some(&named);
        assert!(backend.break_leases(&order).unwrap().holders.is_empty());
        let events = events.lock().unwrap();
        let summary: Vec<_> = events[1..]
            .iter()
            .map(|e| (e.op, e.result, e.reason))
            .collect();
        assert_eq!(
            summary,
            [
                (LockOp::Break, EventResult::Ok, None),
                (
                    LockOp::Break,
                    EventResult::Fail,
                    Some(FailureReason::NotFound)
                ),
            ]
        );
        assert_eq!(events[1].key_hash, Some(hash_key("job")));
        assert_eq!(events[1].lock_id, None);
        assert_eq!(events[2].lock_id.as_deref(), Some(lease.lock_id.as_str()));
        let shown = serde_json::to_string(&events[1]).unwrap();
        assert!(shown.starts_with(r#"{"type":"break","#), "{shown}");
        assert!(events.iter().all(|e| !format!("{e:?}").contains("ops-7")));
    }

    #[test]
    fn refused_input_is_not_an_operation() {
        let (backend, events) = recorded(false);
        assert!(backend.release("bad").is_err());
        assert!(events.lock().unwrap().is_empty());
    }

    /// A store that is always down.
    struct Failing;

    impl Driver for Failing {
        fn describe(&self) -> Capabilities {
            Capabilities::new("failing", true, crate::TimeAuthority::Server)
        }
        fn try_acquire(&self, _: &Request<'_>) -> Result<Acquisitions> {
            Err(down())
        }
        fn release_lease(&self, _: LeaseRef<'_>) -> Result<Outcome<()>> {
            Err(down())
        }
        fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
            leases.iter().map(|_| Err(down())).collect()
        }
        fn key_is_locked(&self, _: &Key) -> Result<bool> {
            Err(down())
        }
        fn find(&self, _: Find<'_>) -> Result<Vec<LockRecord>> {
            Err(down())
        }
    }

    fn down() -> crate::LockError {
        crate::LockError::new(ErrorCode::ServiceUnavailable, "down")
    }

    #[test]
    fn a_panicking_callback_does_not_break_the_operation() {
        let backend = with_telemetry(
            MemoryBackend::new(),
            TelemetryOptions::new(|_| panic!("callback bug")),
        );
        let lease = backend.acquire("job", TTL).unwrap().lease().unwrap();
        assert!(backend.is_locked("job").unwrap());
        assert!(backend.release(&lease.lock_id).unwrap());
    }
}
