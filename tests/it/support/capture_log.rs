//! One `log` logger for the whole test binary, at TRACE, that keeps the records a thread asks
//! for: [`capture`] runs a closure and answers every record logged on its thread meanwhile, of
//! any crate and any level. `log::set_logger` can be called once per process, so every test
//! that looks at logs goes through here; records of other threads (other tests, servers) are
//! dropped, so tests running side by side do not see each other's.

use std::cell::RefCell;
use std::sync::Once;

use log::{Level, LevelFilter, Log, Metadata, Record};

/// A record as it was logged.
#[derive(Debug, Clone)]
pub struct Captured {
    pub level: Level,
    pub target: String,
    pub message: String,
}

thread_local! {
    /// The records of this thread, while a [`capture`] runs on it.
    static RECORDS: RefCell<Option<Vec<Captured>>> = const { RefCell::new(None) };
}

struct ThreadCapture;

impl Log for ThreadCapture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        // `try_`: formatting a record may log in turn (while `log` below holds no borrow).
        RECORDS.with(|records| records.try_borrow().is_ok_and(|records| records.is_some()))
    }

    fn log(&self, record: &Record<'_>) {
        if !self.enabled(record.metadata()) {
            return;
        }
        // Formatted before the records are borrowed: formatting may log.
        let captured = Captured {
            level: record.level(),
            target: record.target().to_owned(),
            message: record.args().to_string(),
        };
        RECORDS.with(|records| {
            if let Ok(mut records) = records.try_borrow_mut()
                && let Some(records) = records.as_mut()
            {
                records.push(captured);
            }
        });
    }

    fn flush(&self) {}
}

static LOGGER: ThreadCapture = ThreadCapture;

/// Installs the logger, once, at TRACE.
fn install() {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        log::set_logger(&LOGGER).expect("no other logger is installed in the test binary");
        log::set_max_level(LevelFilter::Trace);
    });
}

/// Runs `f`, and answers what it returned and every record logged on this thread meanwhile.
pub fn capture<T>(f: impl FnOnce() -> T) -> (T, Vec<Captured>) {
    install();
    RECORDS.with(|records| *records.borrow_mut() = Some(Vec::new()));
    let result = f();
    let records = RECORDS.with(|records| records.borrow_mut().take().unwrap_or_default());
    (result, records)
}
