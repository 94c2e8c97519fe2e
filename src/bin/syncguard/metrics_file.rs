//! `run --metrics-file PATH`: the run's figures in the Prometheus text format, for
//! node_exporter's textfile collector.
//!
//! The file is written whole to a temporary file in the same folder and renamed over `PATH`,
//! so that the collector never reads half of it. Each run overwrites it; the one figure that
//! must outlive a failed run, the time of the last success, is carried over from the file the
//! previous run left (see [`Figures::render`]).

use std::fs;
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// The gauge that carries the last success over from one run's file to the next.
const LAST_SUCCESS: &str = "syncguard_run_last_success_timestamp_seconds";

/// What one `run` came to.
#[derive(Debug, Clone, PartialEq)]
pub struct Figures {
    /// `--key`, as given (several keys: in their order, joined by `,`).
    pub key: String,
    /// Whether the lock (or permit) was taken.
    pub acquired: bool,
    /// From the start of the acquisition to its end, taken or not.
    pub wait: Duration,
    /// How long the command ran (zero if it never started).
    pub ran: Duration,
    /// `run`'s own exit code.
    pub exit_code: u8,
    /// Whether the lease was lost (or about to be) while the command ran.
    pub lost: bool,
    /// Whether the command started: a success is a command that ran and a run that exited 0.
    pub started: bool,
}

impl Figures {
    /// Figures for a run on `key` that has not (yet) acquired anything.
    pub fn new(key: &str) -> Figures {
        Figures {
            key: key.to_owned(),
            acquired: false,
            wait: Duration::ZERO,
            ran: Duration::ZERO,
            exit_code: 0,
            lost: false,
            started: false,
        }
    }

    /// The file's text for a run that ended at `end`; `last_success` is the end of the last
    /// successful run before this one (0: none known).
    pub fn render(&self, end: SystemTime, last_success: f64) -> String {
        let end = seconds(end.duration_since(UNIX_EPOCH).unwrap_or_default());
        let succeeded = self.started && self.exit_code == 0;
        let last_success = if succeeded { end } else { last_success };
        let labels = format!("{{key=\"{}\"}}", escape_label(&self.key));
        let gauges: [(&str, &str, f64); 7] = [
            (
                "syncguard_run_acquired",
                "1 if the run took the lock (or permit), 0 if not.",
                flag(self.acquired),
            ),
            (
                "syncguard_run_wait_seconds",
                "Seconds the run spent acquiring the lock, taken or not.",
                seconds(self.wait),
            ),
            (
                "syncguard_run_seconds",
                "Seconds the command ran (0 if it did not run).",
                seconds(self.ran),
            ),
            (
                "syncguard_run_exit_code",
                "The exit code of syncguard run itself.",
                f64::from(self.exit_code),
            ),
            (
                "syncguard_run_lost",
                "1 if the lease was lost while the command ran, 0 if not.",
                flag(self.lost),
            ),
            (
                "syncguard_run_end_timestamp_seconds",
                "Unix time at which the run ended.",
                end,
            ),
            (
                LAST_SUCCESS,
                "Unix time at which the last run whose command ran and exited 0 ended (0: none \
                 known).",
                last_success,
            ),
        ];
        let mut text = String::new();
        for (name, help, value) in gauges {
            text.push_str(&format!(
                "# HELP {name} {help}\n# TYPE {name} gauge\n{name}{labels} {value}\n"
            ));
        }
        text
    }

    /// Writes the figures to `path` atomically; a failure is a warning on stderr (printed
    /// with `-q` too: the file is what the operator's alert reads), never a changed exit code.
    pub fn write_or_warn(&self, path: &Path) {
        if let Err(error) = self.write(path) {
            eprintln!(
                "syncguard: warning: could not write --metrics-file {}: {error}",
                path.display()
            );
        }
    }

    fn write(&self, path: &Path) -> io::Result<()> {
        let previous = fs::read_to_string(path).unwrap_or_default();
        let text = self.render(SystemTime::now(), last_success(&previous, &self.key));
        let temporary = temporary_beside(path)?;
        let written = fs::File::create(&temporary).and_then(|mut file| {
            file.write_all(text.as_bytes())?;
            file.sync_all()
        });
        let renamed = written.and_then(|()| fs::rename(&temporary, path));
        if renamed.is_err() {
            // Never leave a temporary behind for the collector to find (it ignores names that
            // do not end in .prom, but the folder should not fill up either).
            let _ = fs::remove_file(&temporary);
        }
        renamed
    }
}

/// A temporary file's name in `path`'s folder: same file system, so the rename is atomic; a
/// name node_exporter ignores (it reads `*.prom` only), unique to this process.
fn temporary_beside(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut temporary = std::ffi::OsString::from(".");
    temporary.push(name);
    temporary.push(format!(".{}.tmp", std::process::id()));
    Ok(path.with_file_name(temporary))
}

/// The last success recorded for `key` in a previous file's text (0 if none).
fn last_success(previous: &str, key: &str) -> f64 {
    let prefix = format!("{LAST_SUCCESS}{{key=\"{}\"}} ", escape_label(key));
    previous
        .lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .and_then(|value| value.trim().parse::<f64>().ok())
        .filter(|value| value.is_finite() && *value >= 0.0)
        .unwrap_or(0.0)
}

/// A label value as the text format wants it: `\`, `"` and newline escaped.
fn escape_label(value: &str) -> String {
    let mut escaped = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => escaped.push_str("\\\\"),
            '"' => escaped.push_str("\\\""),
            '\n' => escaped.push_str("\\n"),
            c => escaped.push(c),
        }
    }
    escaped
}

fn seconds(duration: Duration) -> f64 {
    duration.as_secs_f64()
}

fn flag(set: bool) -> f64 {
    if set { 1.0 } else { 0.0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape_label("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
    }

    #[test]
    fn the_last_success_is_carried_over_until_the_next_one() {
        let end = UNIX_EPOCH + Duration::from_secs(1_000);
        let mut figures = Figures::new("k\"ey");
        figures.started = true;
        let first = figures.render(end, 0.0);
        assert_eq!(last_success(&first, "k\"ey"), 1_000.0);
        assert_eq!(last_success(&first, "other"), 0.0);
        figures.exit_code = 1;
        let later = UNIX_EPOCH + Duration::from_secs(2_000);
        let second = figures.render(later, last_success(&first, "k\"ey"));
        assert!(
            second.contains("syncguard_run_last_success_timestamp_seconds{key=\"k\\\"ey\"} 1000\n"),
            "{second}"
        );
        assert!(
            second.contains("syncguard_run_end_timestamp_seconds{key=\"k\\\"ey\"} 2000\n"),
            "{second}"
        );
    }
}
