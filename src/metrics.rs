//! Feature `metrics`: the observer every [`Locker`](crate::Locker) is given, which records what
//! its acquisitions and leases lived through under fixed names through the `metrics` facade.
//!
//! Names follow Prometheus' conventions; labels are the backend's name
//! ([`Capabilities::backend`](crate::Capabilities::backend)), the kind of lease (`lock`,
//! `permit`) and an outcome — never a key, lock id or holder, so that their number stays small.
//! Without a recorder installed (`metrics::set_global_recorder`, or an exporter that installs
//! one) the facade drops everything at the cost of a few loads.

use metrics::{
    Key, Label, Level, Metadata, Unit, describe_counter, describe_gauge, describe_histogram,
    with_recorder,
};

use crate::observe::{
    Acquired, Detached, Kind, LockObserver, Lost, NotAcquired, Refusal, Released, RenewalFailed,
    Renewed,
};

/// `syncguard_acquisitions_total{backend,kind,outcome}`: acquisitions by how they ended.
pub const ACQUISITIONS: &str = "syncguard_acquisitions_total";
/// `syncguard_acquire_wait_seconds{backend,kind}`: from the call to the acquisition.
pub const ACQUIRE_WAIT: &str = "syncguard_acquire_wait_seconds";
/// `syncguard_hold_seconds{backend,kind}`: from the acquisition to the release or loss.
pub const HOLD: &str = "syncguard_hold_seconds";
/// `syncguard_renewals_total{backend,outcome}`: renewals by outcome (`ok`, `lost`, `error`).
pub const RENEWALS: &str = "syncguard_renewals_total";
/// `syncguard_leases_lost_total{backend,kind}`: leases lost.
pub const LEASES_LOST: &str = "syncguard_leases_lost_total";
/// `syncguard_held_leases{backend,kind}`: leases this process holds now.
pub const HELD_LEASES: &str = "syncguard_held_leases";

/// What the metrics' registrations say about where they come from.
const METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Acquisition outcomes, in the order of [`KindKeys::acquisitions`].
const OUTCOMES: [&str; 5] = ["acquired", "locked", "timeout", "cancelled", "error"];

/// Renewal outcomes, in the order of [`Metrics::renewals`].
const RENEWAL_OUTCOMES: [&str; 3] = ["ok", "lost", "error"];

/// The keys of one kind of lease, labelled once: an event then costs the recorder's lookup
/// only, not building and hashing its key (a third of a microsecond a lease on `memory:`).
#[derive(Debug)]
struct KindKeys {
    acquisitions: [Key; 5],
    wait: Key,
    hold: Key,
    lost: Key,
    held: Key,
}

impl KindKeys {
    fn new(backend: &'static str, kind: Kind) -> Self {
        let labels = [("backend", backend), ("kind", kind.as_str())];
        KindKeys {
            acquisitions: OUTCOMES
                .map(|outcome| key(ACQUISITIONS, &[labels[0], labels[1], ("outcome", outcome)])),
            wait: key(ACQUIRE_WAIT, &labels),
            hold: key(HOLD, &labels),
            lost: key(LEASES_LOST, &labels),
            held: key(HELD_LEASES, &labels),
        }
    }
}

fn key(name: &'static str, labels: &[(&'static str, &'static str)]) -> Key {
    let labels: Vec<Label> = labels
        .iter()
        .map(|(label, value)| Label::from_static_parts(label, value))
        .collect();
    Key::from_parts(name, labels)
}

/// Records a locker's events under the names above, labelled by its backend. Each update goes
/// to the recorder in force at the time (a local one, else the global one), as the facade's
/// macros do: a recorder installed after the locker was made gets them too.
#[derive(Debug)]
pub(crate) struct Metrics {
    lock: KindKeys,
    permit: KindKeys,
    renewals: [Key; 3],
}

impl Metrics {
    /// For a locker over `backend`. Describes the names to the recorder installed now.
    pub(crate) fn new(backend: &'static str) -> Self {
        describe_counter!(ACQUISITIONS, Unit::Count, "Acquisitions by how they ended.");
        describe_histogram!(
            ACQUIRE_WAIT,
            Unit::Seconds,
            "From the call to the acquisition, for acquired ones."
        );
        describe_histogram!(
            HOLD,
            Unit::Seconds,
            "From the acquisition to the release or loss."
        );
        describe_counter!(RENEWALS, Unit::Count, "Lease renewals by outcome.");
        describe_counter!(LEASES_LOST, Unit::Count, "Leases lost.");
        describe_gauge!(HELD_LEASES, Unit::Count, "Leases this process holds now.");
        Metrics {
            lock: KindKeys::new(backend, Kind::Lock),
            permit: KindKeys::new(backend, Kind::Permit),
            renewals: RENEWAL_OUTCOMES
                .map(|outcome| key(RENEWALS, &[("backend", backend), ("outcome", outcome)])),
        }
    }

    fn keys(&self, kind: Kind) -> &KindKeys {
        match kind {
            Kind::Lock => &self.lock,
            Kind::Permit => &self.permit,
        }
    }

    fn count(key: &Key) {
        with_recorder(|recorder| recorder.register_counter(key, &METADATA).increment(1));
    }

    fn record(key: &Key, value: f64) {
        with_recorder(|recorder| recorder.register_histogram(key, &METADATA).record(value));
    }

    fn add(key: &Key, value: f64) {
        with_recorder(|recorder| recorder.register_gauge(key, &METADATA).increment(value));
    }

    fn acquisition(&self, kind: Kind, outcome: usize) {
        Self::count(&self.keys(kind).acquisitions[outcome]);
    }

    fn renewal(&self, outcome: usize) {
        Self::count(&self.renewals[outcome]);
    }

    /// A hold ended (released, lost or handed over) after `seconds`; `None` for a hand-over,
    /// which is not a hold's end in the store.
    fn hold_ended(&self, kind: Kind, seconds: Option<f64>) {
        let keys = self.keys(kind);
        if let Some(seconds) = seconds {
            Self::record(&keys.hold, seconds);
        }
        Self::add(&keys.held, -1.0);
    }
}

impl LockObserver for Metrics {
    fn acquired(&self, event: &Acquired<'_>) {
        let kind = event.subject.kind();
        self.acquisition(kind, 0);
        let keys = self.keys(kind);
        Self::record(&keys.wait, event.wait.as_secs_f64());
        Self::add(&keys.held, 1.0);
    }

    fn not_acquired(&self, event: &NotAcquired<'_>) {
        let outcome = match event.why {
            Refusal::Held => 1,
            Refusal::Timeout => 2,
            Refusal::Cancelled => 3,
            Refusal::Error(_) => 4,
        };
        self.acquisition(event.subject.kind(), outcome);
    }

    fn renewed(&self, _: &Renewed<'_>) {
        self.renewal(0);
    }

    fn renewal_failed(&self, _: &RenewalFailed<'_>) {
        self.renewal(2);
    }

    fn lost(&self, event: &Lost<'_>) {
        let kind = event.subject.kind();
        if event.by_renewal {
            self.renewal(1);
        }
        Self::count(&self.keys(kind).lost);
        if event.ends_hold {
            self.hold_ended(kind, Some(event.held_for.as_secs_f64()));
        }
    }

    fn released(&self, event: &Released<'_>) {
        if !event.after_loss {
            let seconds = event.held_for.as_secs_f64();
            self.hold_ended(event.subject.kind(), Some(seconds));
        }
    }

    fn detached(&self, event: &Detached<'_>) {
        self.hold_ended(event.subject.kind(), None);
    }
}
