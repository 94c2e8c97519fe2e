//! A `metrics` recorder made of cells: every metric is the cell its key names, and what a
//! description keeps is up to the cells' store. The bench's recorder and the `metrics` test's
//! (which compiles this file in by its path) are both one.

use std::sync::Arc;

use metrics::{
    Counter, CounterFn, Gauge, GaugeFn, Histogram, HistogramFn, Key, KeyName, Metadata, Recorder,
    SharedString, Unit,
};

/// Where a recorder's cells live.
pub trait Cells: Send + Sync + 'static {
    /// One cell, for a counter, a gauge or a histogram alike.
    type Cell: CounterFn + GaugeFn + HistogramFn + Send + Sync + 'static;

    /// The cell of `key`: every registration of a key asks for it.
    fn cell(&self, key: &Key) -> Arc<Self::Cell>;

    /// Keeps that the metric `name` is in `unit`; nothing, unless the store says otherwise.
    fn describe(&self, _name: KeyName, _unit: Option<Unit>) {}
}

/// The recorder of the cells in `C`.
pub struct CellRecorder<C>(pub C);

impl<C: Cells> Recorder for CellRecorder<C> {
    fn describe_counter(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
        self.0.describe(name, unit);
    }
    fn describe_gauge(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
        self.0.describe(name, unit);
    }
    fn describe_histogram(&self, name: KeyName, unit: Option<Unit>, _: SharedString) {
        self.0.describe(name, unit);
    }
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        Counter::from_arc(self.0.cell(key))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        Gauge::from_arc(self.0.cell(key))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        Histogram::from_arc(self.0.cell(key))
    }
}
