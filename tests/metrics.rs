//! Feature `metrics`: a `Locker` records its fixed names through the `metrics` facade, with no
//! code of the program's. A test binary of its own: the recorder is process-wide, and no other
//! test's locker may add to what this one counts.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread;
use std::time::{Duration, Instant};

use metrics::{CounterFn, GaugeFn, HistogramFn, Key, KeyName, Unit};
use syncguard::{
    BreakOptions, CancelToken, Heartbeat, LockBackend, LockOptions, Locker, MemoryBackend,
};

// The recorder of cells the bench's recorder is too.
#[path = "../examples/bench_parts/cells.rs"]
mod cells;
use cells::{CellRecorder, Cells};

/// Everything recorded, by `name{label=value,…}` (labels sorted).
#[derive(Default)]
struct Values {
    counters: BTreeMap<String, u64>,
    gauges: BTreeMap<String, f64>,
    histograms: BTreeMap<String, Vec<f64>>,
    units: BTreeMap<String, Option<Unit>>,
    /// Calls of `register_*`: an exporter's lookup in its registry, each under a lock.
    registrations: u64,
}

#[derive(Default, Clone)]
struct Kept(Arc<Mutex<Values>>);

impl Kept {
    fn values<T>(&self, read: impl FnOnce(&mut Values) -> T) -> T {
        read(&mut self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn counter(&self, id: &str) -> u64 {
        self.values(|v| v.counters.get(id).copied().unwrap_or(0))
    }

    fn gauge(&self, id: &str) -> f64 {
        self.values(|v| v.gauges.get(id).copied().unwrap_or(0.0))
    }

    fn samples(&self, id: &str) -> Vec<f64> {
        self.values(|v| v.histograms.get(id).cloned().unwrap_or_default())
    }
}

struct Cell {
    kept: Kept,
    id: String,
}

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.kept
            .values(|v| *v.counters.entry(self.id.clone()).or_default() += value);
    }
    fn absolute(&self, value: u64) {
        self.kept
            .values(|v| v.counters.insert(self.id.clone(), value));
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        self.kept
            .values(|v| *v.gauges.entry(self.id.clone()).or_default() += value);
    }
    fn decrement(&self, value: f64) {
        self.kept
            .values(|v| *v.gauges.entry(self.id.clone()).or_default() -= value);
    }
    fn set(&self, value: f64) {
        self.kept
            .values(|v| v.gauges.insert(self.id.clone(), value));
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        self.kept
            .values(|v| v.histograms.entry(self.id.clone()).or_default().push(value));
    }
}

impl Cells for Kept {
    type Cell = Cell;

    fn cell(&self, key: &Key) -> Arc<Cell> {
        self.values(|v| v.registrations += 1);
        let mut labels: Vec<String> = key
            .labels()
            .map(|label| format!("{}={}", label.key(), label.value()))
            .collect();
        labels.sort();
        let id = format!("{}{{{}}}", key.name(), labels.join(","));
        Arc::new(Cell {
            kept: self.clone(),
            id,
        })
    }

    fn describe(&self, name: KeyName, unit: Option<Unit>) {
        self.values(|v| v.units.insert(name.as_str().to_owned(), unit));
    }
}

fn wait_until(what: &str, mut condition: impl FnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(15);
    while !condition() {
        assert!(Instant::now() < end, "gave up waiting for {what}");
        thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn a_locker_records_the_fixed_names() {
    // Made before the recorder is installed: it records into the no-op recorder for good.
    let early = Locker::new(MemoryBackend::new());
    let kept = Kept::default();
    metrics::set_global_recorder(CellRecorder(kept.clone()))
        .expect("the only recorder of this binary");
    let defaults = LockOptions::default()
        .ttl(Duration::from_secs(5))
        .heartbeat(Heartbeat::Every(Duration::from_millis(100)));
    let locker = Locker::with_defaults(MemoryBackend::new(), defaults);
    // Every handle is registered when the locker is made; no event looks one up again.
    let registered = kept.values(|v| v.registrations);
    drop(early.lock("metrics:early").unwrap());
    let lock = |outcome: &str| {
        format!("syncguard_acquisitions_total{{backend=memory,kind=lock,outcome={outcome}}}")
    };

    let held = locker.lock("metrics:held").unwrap();
    let gone = locker.lock("metrics:gone").unwrap();
    assert!(locker.try_lock("metrics:held").unwrap().is_none());
    let short = Duration::from_millis(50);
    assert!(
        locker
            .try_lock_for("metrics:held", short)
            .unwrap()
            .is_none()
    );
    let cancel = CancelToken::new();
    cancel.cancel();
    let cancelled = LockOptions::default().cancel(cancel);
    assert!(locker.lock_with("metrics:held", &cancelled).is_err());
    let invalid = LockOptions::default().ttl(Duration::ZERO);
    assert!(locker.lock_with("metrics:other", &invalid).is_err());
    let permits = locker.semaphore("metrics:sem", 2).unwrap();
    let permit = permits.acquire().unwrap();
    assert_eq!(
        kept.gauge("syncguard_held_leases{backend=memory,kind=lock}"),
        2.0
    );
    assert_eq!(
        kept.gauge("syncguard_held_leases{backend=memory,kind=permit}"),
        1.0
    );

    let renewals = |outcome: &str| {
        kept.counter(&format!(
            "syncguard_renewals_total{{backend=memory,outcome={outcome}}}"
        ))
    };
    wait_until("a renewal", || renewals("ok") >= 1);
    assert!(locker.backend().release(gone.lock_id()).unwrap());
    wait_until("the loss", || gone.is_lost());
    let lost = "syncguard_leases_lost_total{backend=memory,kind=lock}";
    wait_until("the loss counted", || kept.counter(lost) == 1);
    assert_eq!(renewals("lost"), 1);
    assert_eq!(renewals("error"), 0);
    assert_eq!(
        kept.gauge("syncguard_held_leases{backend=memory,kind=lock}"),
        1.0
    );

    drop(held);
    drop(gone);
    drop(permit);
    for outcome in ["acquired", "locked", "timeout", "cancelled", "error"] {
        let expected = if outcome == "acquired" { 2 } else { 1 };
        assert_eq!(kept.counter(&lock(outcome)), expected, "{outcome}");
    }
    let permit_acquired =
        "syncguard_acquisitions_total{backend=memory,kind=permit,outcome=acquired}";
    assert_eq!(kept.counter(permit_acquired), 1);
    for kind in ["lock", "permit"] {
        let labels = format!("{{backend=memory,kind={kind}}}");
        assert_eq!(kept.gauge(&format!("syncguard_held_leases{labels}")), 0.0);
        let waits = kept.samples(&format!("syncguard_acquire_wait_seconds{labels}"));
        let holds = kept.samples(&format!("syncguard_hold_seconds{labels}"));
        let leases = if kind == "lock" { 2 } else { 1 };
        assert_eq!((waits.len(), holds.len()), (leases, leases), "{kind}");
        assert!(waits.iter().chain(&holds).all(|s| *s >= 0.0));
    }
    // Breaks, by what they came to: one broke a lock, two found nothing live.
    let broken = locker.lock("metrics:broken").unwrap();
    let now = BreakOptions::new().by("metrics test").no_delay();
    assert_eq!(
        locker
            .break_key("metrics:broken", &now)
            .unwrap()
            .holders
            .len(),
        1
    );
    assert!(
        locker
            .break_key("metrics:broken", &now)
            .unwrap()
            .holders
            .is_empty()
    );
    let permits = BreakOptions::new().by("metrics test").permits();
    assert!(
        locker
            .break_key("metrics:sem", &permits)
            .unwrap()
            .holders
            .is_empty()
    );
    let breaks = |kind: &str, outcome: &str| {
        kept.counter(&format!(
            "syncguard_breaks_total{{backend=memory,kind={kind},outcome={outcome}}}"
        ))
    };
    assert_eq!((breaks("lock", "broken"), breaks("lock", "none")), (1, 1));
    assert_eq!(
        (breaks("permit", "broken"), breaks("permit", "none")),
        (0, 1)
    );
    drop(broken);
    let units = kept.values(|v| v.units.clone());
    for (name, unit) in [
        ("syncguard_acquisitions_total", Unit::Count),
        ("syncguard_acquire_wait_seconds", Unit::Seconds),
        ("syncguard_hold_seconds", Unit::Seconds),
        ("syncguard_renewals_total", Unit::Count),
        ("syncguard_leases_lost_total", Unit::Count),
        ("syncguard_held_leases", Unit::Count),
        ("syncguard_breaks_total", Unit::Count),
    ] {
        assert_eq!(units.get(name), Some(&Some(unit)), "{name}");
    }
    // No key ever becomes a label.
    let ids: Vec<String> = kept.values(|v| {
        (v.counters
            .keys()
            .chain(v.gauges.keys())
            .chain(v.histograms.keys()))
        .cloned()
        .collect()
    });
    assert!(ids.iter().all(|id| !id.contains("metrics:")), "{ids:?}");
    assert_eq!(kept.values(|v| v.registrations), registered);
}
