//! What a command ends with, and how the process ends with it: the JSON printed on stdout, the
//! error line on stderr, and the exit code (the table of codes is [`crate::help::exit_codes!`]).

use std::io::Write as _;
use std::process::ExitCode;

use serde_json::{Value, json};
use syncguard::{ErrorCode, LockError};

/// What a command ends with.
pub enum Outcome {
    /// One JSON line on stdout, then this exit code.
    Printed(Value, u8),
    /// One JSON line on stdout for each value (perhaps none), then exit 0.
    Lines(Vec<Value>),
    /// Only this exit code (`run`: the command wrote its own output).
    Exit(u8),
}

impl Outcome {
    /// Prints what the command ended with: its exit code.
    pub fn exit(self) -> ExitCode {
        match self {
            Outcome::Printed(value, code) => {
                let mut stdout = std::io::stdout().lock();
                let _ = writeln!(stdout, "{value}");
                ExitCode::from(code)
            }
            Outcome::Lines(values) => {
                let mut stdout = std::io::stdout().lock();
                for value in values {
                    let _ = writeln!(stdout, "{value}");
                }
                ExitCode::SUCCESS
            }
            Outcome::Exit(code) => ExitCode::from(code),
        }
    }
}

/// `run`: the lock was not acquired within `--wait` (unless `--conflict-exit-code` says
/// otherwise); `EX_TEMPFAIL`, as flock(1) uses.
pub const EXIT_NOT_ACQUIRED: u8 = 75;
/// `run`: the lease was lost while the command ran.
pub const EXIT_LOST: u8 = 76;
/// `run`: the command reached `--max-runtime` (as timeout(1) exits).
pub const EXIT_MAX_RUNTIME: u8 = 124;

/// What clap could not parse: help and version go to stdout (exit 0); everything else is one
/// `InvalidArgument` line with one hint (exit 2).
pub fn usage_error(error: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match error.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = error.print();
            return ExitCode::SUCCESS;
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = error.print();
            return ExitCode::from(2);
        }
        _ => {}
    }
    // clap's message spans lines (the names of missing arguments follow on the next ones, then
    // the usage and its own hint); keep the message itself, on one line, and add one hint.
    let text = error.to_string();
    let message: Vec<&str> = text
        .lines()
        .map(str::trim)
        .take_while(|line| !line.starts_with("Usage:") && !line.starts_with("For more information"))
        .filter(|line| !line.is_empty() && !line.starts_with("tip:"))
        .collect();
    let message = message.join(" ");
    let message = message.strip_prefix("error: ").unwrap_or(&message);
    fail(&LockError::invalid_argument(format!(
        "{message} (see --help)"
    )))
}

/// Prints the error line and exits with [`error_exit_code`].
pub fn fail(error: &LockError) -> ExitCode {
    eprintln!("error: {}: {}", error.code(), error.message());
    ExitCode::from(error_exit_code(error))
}

/// The exit code of a command that ended with `error`: 2 for bad input, 3 for everything else.
pub fn error_exit_code(error: &LockError) -> u8 {
    if error.code() == ErrorCode::InvalidArgument {
        2
    } else {
        3
    }
}

/// One JSON value per lock or permit.
pub fn json_values<T: serde::Serialize>(items: &[T]) -> Vec<Value> {
    items.iter().map(|item| json!(item)).collect()
}
