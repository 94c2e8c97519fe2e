//! `syncguard`: distributed locks for shell scripts and cron jobs — a distributed `flock(1)`.
//!
//! Every command prints one JSON object on stdout (`list`: one a line, for each lock); errors
//! are one line on stderr,
//! `error: <Code>: <message>`. The exit codes, and what `run` does on each signal, are in one
//! table, [`help::exit_codes!`], which `--help` prints.
//!
//! This file parses the command line and hands it to the command's own module: [`acquire`],
//! [`release`], [`extend`], [`status`], [`list`], [`run`], [`break_key`], [`leader`],
//! [`watch`], [`setup`].
//!
//! Modules: [`args`] is the command line; [`help`] its longer help texts; [`outcome`] what a
//! command ends with; [`url`] the backend's URL; [`duration`] parses durations; [`holder`]
//! says who holds a lock taken here; [`input`] checks the input before any backend is reached;
//! [`keys`] are the keys `--key` names (one, or several held together); [`hold`] and [`held`]
//! what is taken and what is then held; [`lock_ids`] the lock ids `release` and `extend` act
//! on; [`waiting`] the pace of a wait; [`connecting`] connects within `--wait`; [`run`] is the
//! `run` supervisor, with [`supervisor`] watching the command and [`release_at_end`] giving
//! the lock back; [`group`] the process group it runs the command in, and [`watcher`] the
//! process that ends it if `run` cannot; [`metrics_file`] writes `run --metrics-file`;
//! [`verbose`] is `-v`.

mod acquire;
mod args;
mod break_key;
mod connecting;
mod duration;
mod extend;
mod group;
mod held;
mod help;
mod hold;
mod holder;
mod input;
mod interrupt;
mod keys;
mod leader;
mod list;
mod lock_ids;
mod metrics_file;
mod outcome;
mod release;
mod release_at_end;
mod run;
mod setup;
mod status;
mod supervisor;
mod url;
mod verbose;
mod waiting;
mod watch;
mod watcher;

use std::process::ExitCode;

use clap::Parser;

use crate::args::{Cli, Command};
use crate::outcome::{Outcome, fail, usage_error};
use crate::url::{backend_url, connect};

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => return usage_error(&error),
    };
    match execute(cli) {
        Ok(outcome) => outcome.exit(),
        Err(error) => fail(&error),
    }
}

fn execute(cli: Cli) -> syncguard::Result<Outcome> {
    verbose::install(cli.verbose);
    let url = cli.url.filter(|url| !url.trim().is_empty());
    // `run` checks its own arguments first, and the URL when it connects, so that its
    // --metrics-file is written whatever it refuses.
    if !matches!(cli.command, Command::Run { .. }) {
        backend_url(url.as_deref())?;
    }
    // Every command checks its input before it calls this: bad usage exits 2 at once, without
    // waiting for a server that may never answer (see `input`).
    let backend = || connect(url.as_deref());
    match cli.command {
        Command::Acquire { lock } => acquire::acquire(backend, &lock),
        Command::Release { ids, permit } => release::release(backend, ids, &permit),
        Command::Extend { ids, ttl, permit } => extend::extend(backend, ids, ttl, &permit),
        Command::Status { key, lock_id, raw } => {
            status::status(backend, key.as_deref(), lock_id.as_deref(), raw)
        }
        Command::List {
            prefix,
            limit,
            raw,
            permits,
            shared,
        } => list::list(backend, &prefix, limit, raw, list::listed(permits, shared)),
        Command::Run { lock, grace, flags } => {
            let url = url.clone();
            run::run(move || connect(url.as_deref()), lock, grace, flags)
        }
        Command::Break { args } => break_key::break_key(backend, &args),
        Command::Leader { key, watch } => leader::leader(backend, &key, watch),
        Command::Watch {
            key,
            shared,
            permits,
            until_free,
        } => watch::watch(
            backend,
            &watch::WatchArgs {
                key,
                kind: list::listed(permits.is_some(), shared),
                until_free,
            },
        ),
        Command::Setup => setup::setup(backend_url(url.as_deref())?),
    }
}
