//! `-v`/`--verbose`: the library's `log` lines on stderr, and one line per backend operation
//! (each acquisition attempt, renewal, release), off by default.
//!
//! The operations come from the library's telemetry decorator ([`with_telemetry`]), wrapped
//! around the backend only when `-v` is given: one mechanism reports backend calls, here and
//! for applications, and without `-v` nothing is wrapped. Events carry hashes, never a raw key
//! or lock id, and the URL is never logged, so `-v` output can be pasted into a ticket.

use std::io::Write as _;

use log::{Level, LevelFilter, Log, Metadata, Record};
use syncguard::{LockBackend, TelemetryOptions, with_telemetry};

/// Writes syncguard's own records (the library's and this binary's) to stderr.
struct Stderr;

static LOGGER: Stderr = Stderr;

/// Whether a record comes from syncguard: the clients underneath (redis, postgres, rustls)
/// log at debug and trace too, about their own workings, and are left out.
fn is_ours(target: &str) -> bool {
    target == "syncguard" || target.starts_with("syncguard::")
}

impl Log for Stderr {
    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        metadata.level() <= log::max_level() && is_ours(metadata.target())
    }

    fn log(&self, record: &Record<'_>) {
        if self.enabled(record.metadata()) {
            // Never a panic from a heartbeat thread because stderr went away.
            let _ = writeln!(
                std::io::stderr().lock(),
                "{} {}",
                record.level(),
                record.args()
            );
        }
    }

    fn flush(&self) {}
}

/// Installs the logger for `-v` given `count` times: once, debug and above (every backend
/// operation, the library's notes and warnings); twice or more, trace too. Not given: no
/// logger, as before.
pub fn install(count: u8) {
    let level = match count {
        0 => return,
        1 => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    };
    if log::set_logger(&LOGGER).is_ok() {
        log::set_max_level(level);
    }
}

/// `backend`, reporting each operation as a debug line when `-v` is on; as it is otherwise.
pub fn observed(backend: Box<dyn LockBackend>) -> Box<dyn LockBackend> {
    if !log::log_enabled!(Level::Debug) {
        return backend;
    }
    let name = backend.capabilities().backend;
    let report = move |event: &syncguard::LockEvent| match serde_json::to_string(event) {
        Ok(event) => log::debug!("syncguard: {name}: {event}"),
        Err(error) => log::debug!("syncguard: {name}: an event that is not JSON: {error}"),
    };
    Box::new(with_telemetry(backend, TelemetryOptions::new(report)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_syncguard_records_are_ours() {
        assert!(is_ours("syncguard"));
        assert!(is_ours("syncguard::locker::heartbeat"));
        assert!(!is_ours("syncguard_extra"));
        assert!(!is_ours("rustls::client"));
        assert!(!is_ours("tokio_postgres::query"));
    }
}
