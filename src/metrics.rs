//! Feature `metrics`: the observer every [`Locker`](crate::Locker) is given, which records what
//! its acquisitions and leases lived through under fixed names through the `metrics` facade.
//!
//! Names follow Prometheus' conventions; labels are the backend's name
//! ([`Capabilities::backend`](crate::Capabilities::backend)), the kind of lease (`lock`,
//! `permit`, `shared`) and an outcome — never a key, lock id or holder, so that their number stays small.
//!
//! **Install the recorder (or the exporter that installs one) before making the `Locker`.** A
//! `Locker` registers its metrics with the recorder in force when it is made (the global one,
//! `metrics::set_global_recorder`, or a local one around the call) and from then on updates the
//! handles it was given: an event is an atomic operation, not a lookup in the recorder's
//! registry. A `Locker` made before any recorder was installed records into the no-op recorder
//! for its whole life, and one made under a local recorder keeps recording there.

use metrics::{
    Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder, Unit, describe_counter,
    describe_gauge, describe_histogram, with_recorder,
};

use crate::observe::{
    Acquired, Broke, Detached, Kind, LockObserver, Lost, NotAcquired, Refusal, Released,
    RenewalFailed, Renewed,
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

/// `syncguard_breaks_total{backend,kind,outcome}`: forced releases
/// ([`Locker::break_key`](crate::Locker::break_key)) by what they came to (`broken`: live
/// holders were removed; `none`: nothing live was held).
pub const BREAKS: &str = "syncguard_breaks_total";

/// What the metrics' registrations say about where they come from.
const METADATA: Metadata<'static> =
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()));

/// Acquisition outcomes, in the order of [`KindKeys::acquisitions`].
const OUTCOMES: [&str; 5] = ["acquired", "locked", "timeout", "cancelled", "error"];

/// Renewal outcomes, in the order of [`Metrics::renewals`].
const RENEWAL_OUTCOMES: [&str; 3] = ["ok", "lost", "error"];

/// Break outcomes, in the order of [`KindHandles::breaks`].
const BREAK_OUTCOMES: [&str; 2] = ["broken", "none"];

/// The handles of one kind of lease, registered once: an event then costs an atomic update
/// of the recorder's cell, not a lookup in its registry (under a lock in most exporters: five a
/// lease, a quarter of a lock + release on `memory:`).
#[derive(Debug)]
struct KindHandles {
    acquisitions: [Counter; 5],
    wait: Histogram,
    hold: Histogram,
    lost: Counter,
    held: Gauge,
    breaks: [Counter; 2],
}

impl KindHandles {
    fn new(recorder: &dyn Recorder, backend: &'static str, kind: Kind) -> Self {
        let labels = [("backend", backend), ("kind", kind.as_str())];
        KindHandles {
            acquisitions: OUTCOMES.map(|outcome| {
                let key = key(ACQUISITIONS, &[labels[0], labels[1], ("outcome", outcome)]);
                recorder.register_counter(&key, &METADATA)
            }),
            wait: recorder.register_histogram(&key(ACQUIRE_WAIT, &labels), &METADATA),
            hold: recorder.register_histogram(&key(HOLD, &labels), &METADATA),
            lost: recorder.register_counter(&key(LEASES_LOST, &labels), &METADATA),
            held: recorder.register_gauge(&key(HELD_LEASES, &labels), &METADATA),
            breaks: BREAK_OUTCOMES.map(|outcome| {
                let key = key(BREAKS, &[labels[0], labels[1], ("outcome", outcome)]);
                recorder.register_counter(&key, &METADATA)
            }),
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

/// Records a locker's events under the names above, labelled by its backend, into the handles
/// the recorder in force when it was made gave it (see the module's docs).
#[derive(Debug)]
pub(crate) struct Metrics {
    lock: KindHandles,
    permit: KindHandles,
    shared: KindHandles,
    renewals: [Counter; 3],
}

impl Metrics {
    /// For a locker over `backend`: describes the names to the recorder installed now and
    /// registers every handle the locker will update with it.
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
        describe_counter!(BREAKS, Unit::Count, "Forced releases by what they came to.");
        with_recorder(|recorder| Metrics {
            lock: KindHandles::new(recorder, backend, Kind::Lock),
            permit: KindHandles::new(recorder, backend, Kind::Permit),
            shared: KindHandles::new(recorder, backend, Kind::Shared),
            renewals: RENEWAL_OUTCOMES.map(|outcome| {
                let key = key(RENEWALS, &[("backend", backend), ("outcome", outcome)]);
                recorder.register_counter(&key, &METADATA)
            }),
        })
    }

    fn handles(&self, kind: Kind) -> &KindHandles {
        match kind {
            Kind::Lock => &self.lock,
            Kind::Permit => &self.permit,
            Kind::Shared => &self.shared,
        }
    }

    fn acquisition(&self, kind: Kind, outcome: usize) {
        self.handles(kind).acquisitions[outcome].increment(1);
    }

    fn renewal(&self, outcome: usize) {
        self.renewals[outcome].increment(1);
    }

    /// A hold ended (released, lost or handed over) after `seconds`; `None` for a hand-over,
    /// which is not a hold's end in the store.
    fn hold_ended(&self, kind: Kind, seconds: Option<f64>) {
        let handles = self.handles(kind);
        if let Some(seconds) = seconds {
            handles.hold.record(seconds);
        }
        handles.held.decrement(1.0);
    }
}

impl LockObserver for Metrics {
    fn acquired(&self, event: &Acquired<'_>) {
        let kind = event.subject.kind();
        self.acquisition(kind, 0);
        let handles = self.handles(kind);
        handles.wait.record(event.wait.as_secs_f64());
        handles.held.increment(1.0);
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
        self.handles(kind).lost.increment(1);
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

    fn broken(&self, event: &Broke<'_>) {
        let outcome = usize::from(!event.broke_any());
        self.handles(event.subject.kind()).breaks[outcome].increment(1);
    }
}
