//! Feature `metrics`: a recorder like an exporter's (a registry of atomics, looked up under a
//! lock per registration), for measuring what the `syncguard_*` metrics cost a `Locker`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use metrics::{CounterFn, GaugeFn, HistogramFn, Key};

#[path = "cells.rs"]
mod cells;
use cells::{CellRecorder, Cells};

/// One value: a counter's count, or a gauge's or a histogram's last value as bits.
#[derive(Default)]
struct Cell(AtomicU64);

impl CounterFn for Cell {
    fn increment(&self, value: u64) {
        self.0.fetch_add(value, Ordering::Relaxed);
    }
    fn absolute(&self, value: u64) {
        self.0.fetch_max(value, Ordering::Relaxed);
    }
}

impl GaugeFn for Cell {
    fn increment(&self, value: f64) {
        GaugeFn::set(self, f64::from_bits(self.0.load(Ordering::Relaxed)) + value);
    }
    fn decrement(&self, value: f64) {
        GaugeFn::increment(self, -value);
    }
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl HistogramFn for Cell {
    fn record(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

/// The registry.
#[derive(Default)]
struct Registry(Mutex<HashMap<Key, Arc<Cell>>>);

impl Cells for Registry {
    type Cell = Cell;

    fn cell(&self, key: &Key) -> Arc<Cell> {
        let mut cells = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        Arc::clone(cells.entry(key.clone()).or_default())
    }
}

/// Installs the registry as the process's recorder (before any `Locker` is made).
pub fn install() {
    if metrics::set_global_recorder(CellRecorder(Registry::default())).is_err() {
        eprintln!("bench: a metrics recorder was installed already");
    }
}
