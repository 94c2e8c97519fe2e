//! Feature `metrics`: the observer every [`Locker`](crate::Locker) is given, which records what
//! its acquisitions and leases lived through under fixed names through the `metrics` facade.
//!
//! Names follow Prometheus' conventions; labels are the backend's name
//! ([`Capabilities::backend`](crate::Capabilities::backend)), the kind of lease (`lock`,
//! `permit`) and an outcome — never a key, lock id or holder, so that their number stays small.
//! Without a recorder installed (`metrics::set_global_recorder`, or an exporter that installs
//! one) the facade drops everything at the cost of a few loads.

use metrics::{
    Unit, counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram,
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

/// Records a locker's events under the names above, labelled by `backend`.
#[derive(Debug)]
pub(crate) struct Metrics {
    backend: &'static str,
}

impl Metrics {
    /// For a locker over `backend`. Describes the names to the recorder installed now (a
    /// recorder installed later learns them from the next locker made).
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
        Metrics { backend }
    }

    fn acquisition(&self, kind: Kind, outcome: &'static str) {
        counter!(ACQUISITIONS, "backend" => self.backend, "kind" => kind.as_str(), "outcome" => outcome)
            .increment(1);
    }

    fn renewal(&self, outcome: &'static str) {
        counter!(RENEWALS, "backend" => self.backend, "outcome" => outcome).increment(1);
    }

    /// A hold ended (released, lost or handed over) after `seconds`; `None` for a hand-over,
    /// which is not a hold's end in the store.
    fn hold_ended(&self, kind: Kind, seconds: Option<f64>) {
        let kind = kind.as_str();
        if let Some(seconds) = seconds {
            histogram!(HOLD, "backend" => self.backend, "kind" => kind).record(seconds);
        }
        gauge!(HELD_LEASES, "backend" => self.backend, "kind" => kind).decrement(1.0);
    }
}

impl LockObserver for Metrics {
    fn acquired(&self, event: &Acquired<'_>) {
        let kind = event.subject.kind();
        self.acquisition(kind, "acquired");
        let labels = [("backend", self.backend), ("kind", kind.as_str())];
        histogram!(ACQUIRE_WAIT, &labels).record(event.wait.as_secs_f64());
        gauge!(HELD_LEASES, &labels).increment(1.0);
    }

    fn not_acquired(&self, event: &NotAcquired<'_>) {
        let outcome = match event.why {
            Refusal::Held => "locked",
            Refusal::Timeout => "timeout",
            Refusal::Cancelled => "cancelled",
            Refusal::Error(_) => "error",
        };
        self.acquisition(event.subject.kind(), outcome);
    }

    fn renewed(&self, _: &Renewed<'_>) {
        self.renewal("ok");
    }

    fn renewal_failed(&self, _: &RenewalFailed<'_>) {
        self.renewal("error");
    }

    fn lost(&self, event: &Lost<'_>) {
        let kind = event.subject.kind();
        if event.by_renewal {
            self.renewal("lost");
        }
        counter!(LEASES_LOST, "backend" => self.backend, "kind" => kind.as_str()).increment(1);
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
