//! `syncguard list`: the live locks (or the semaphores' permits, or the shared holders), one
//! JSON line each, and a note on stderr when that is not all of them.

use serde_json::Value;
use syncguard::{Coverage, LeaseKind, LockBackend, LockList};

use crate::input;
use crate::outcome::{Outcome, json_values};

/// What `--permits` and `--shared` ask `list` for (clap lets only one of them through).
pub fn listed(permits: bool, shared: bool) -> LeaseKind {
    match (permits, shared) {
        (true, _) => LeaseKind::Permit,
        (false, true) => LeaseKind::Shared,
        (false, false) => LeaseKind::Lock,
    }
}

/// `list`: `--prefix` checked first, then the listing.
pub fn list(
    connect: impl Fn() -> syncguard::Result<Box<dyn LockBackend>>,
    prefix: &str,
    limit: usize,
    raw: bool,
    listed: LeaseKind,
) -> syncguard::Result<Outcome> {
    input::prefix(prefix)?;
    listing(connect()?.as_ref(), prefix, limit, raw, listed)
}

/// The listing, one JSON line each, and the note when it is not all of them.
fn listing(
    backend: &dyn LockBackend,
    prefix: &str,
    limit: usize,
    raw: bool,
    listed: LeaseKind,
) -> syncguard::Result<Outcome> {
    let (lines, coverage) = match raw {
        true => json_lines(backend.list_raw(prefix, listed, limit)?),
        false => json_lines(backend.list(prefix, listed, limit)?),
    };
    let what = match listed {
        LeaseKind::Lock => "locks",
        LeaseKind::Permit => "permits",
        LeaseKind::Shared => "shared holders",
    };
    match coverage {
        Coverage::Complete => {}
        Coverage::LimitReached => eprintln!(
            "syncguard: more {what} match than --limit {limit}: these are the first; raise \
             --limit or narrow --prefix"
        ),
        _ => {
            let name = backend.capabilities().backend;
            eprintln!(
                "syncguard: the listing stopped at the {name} backend's bound on its work: \
                 {what} may be missing; {}",
                work_bound_advice(name)
            );
        }
    }
    Ok(Outcome::Lines(lines))
}

/// What lifts a backend's bound on a listing's work. Redis' bound counts every key `SCAN`
/// examines, under the prefix or not, so a narrower prefix does not help there.
fn work_bound_advice(backend: &str) -> String {
    match backend {
        "redis" => format!(
            "raise the URL parameter list_scan_budget (default {}) above the number of keys \
             in the database: every key counts, under --prefix or not",
            syncguard::redis::DEFAULT_LIST_SCAN_BUDGET
        ),
        _ => "narrow --prefix".to_owned(),
    }
}

/// One JSON value per listed lock or permit, and whether that is all of them.
fn json_lines<T: serde::Serialize>(listed: LockList<T>) -> (Vec<Value>, Coverage) {
    (json_values(&listed.locks), listed.coverage)
}
