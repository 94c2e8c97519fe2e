//! Bad input to the `syncguard` command exits 2 before any I/O, in every command and for every
//! URL scheme (issue 31): each test points the command at a server that accepts connections
//! and never answers (a [`FaultProxy`] in black-hole mode; `FIRESTORE_EMULATOR_HOST` names it
//! for `firestore://`), and checks the exit code and that the server saw no connection at all.
//! A command that reached the server first would hang until its connect timeout and exit 3:
//! the exit code tells which happened, not how long it took.

use std::net::{Ipv4Addr, SocketAddr};

use syncguard::driver::generate_lock_id;

use crate::cli::sg_env;
use crate::support::proxy::{FaultProxy, Mode};
use crate::support::{free_port, unique};

/// A key of 513 bytes: one over the limit.
fn long_key() -> String {
    "k".repeat(513)
}

/// Runs each of `cases` (a command's arguments) against a silent server under every URL
/// scheme, and expects exit 2 with one `InvalidArgument` line, and no connection to the server.
fn refused_before_any_io(cases: &[Vec<&str>]) {
    // The upstream is never dialled: in black-hole mode the proxy only swallows connections.
    let silent = FaultProxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, free_port())));
    silent.set_mode(Mode::BlackHole);
    let addr = silent.addr().to_string();
    let urls = [
        format!("redis://{addr}/"),
        format!("redis-cluster://{addr}/"),
        format!("redis-sentinel://{addr}/mymaster"),
        format!("postgres://syncguard@{addr}/postgres?connect_timeout=20"),
        "firestore://syncguard-input-test".to_owned(),
    ];
    for url in &urls {
        for args in cases {
            sg_env(url, args, &[("FIRESTORE_EMULATOR_HOST", &addr)])
                .expect_error(2, "InvalidArgument");
        }
    }
    assert_eq!(
        silent.connections(),
        0,
        "a command connected to the server before it checked its input"
    );
}

#[test]
fn acquire_checks_its_input_before_any_io() {
    let (key, long) = (unique("input-acquire"), long_key());
    refused_before_any_io(&[
        vec!["acquire", "--key", &long],
        vec!["acquire", "--key", &long, "--permits", "3"],
        // Beyond MAX_TTL_MS (about 317 years).
        vec!["acquire", "--key", &key, "--ttl", "318y"],
        vec!["acquire", "--key", &key, "--permits", "3", "--ttl", "318y"],
    ]);
}

#[test]
fn status_checks_its_input_before_any_io() {
    let long = long_key();
    refused_before_any_io(&[
        vec!["status", "--key", &long],
        vec!["status", "--key", &long, "--raw"],
        vec!["status", "--lock-id", "bad"],
    ]);
}

#[test]
fn leader_checks_its_input_before_any_io() {
    let long = long_key();
    refused_before_any_io(&[
        vec!["leader", "--key", &long],
        vec!["leader", "--key", &long, "--watch"],
        vec!["leader", "--key", ""],
    ]);
}

#[test]
fn list_checks_its_input_before_any_io() {
    let long = long_key();
    refused_before_any_io(&[
        vec!["list", "--prefix", &long],
        vec!["list", "--permits", "--prefix", &long],
    ]);
}

#[test]
fn release_checks_its_input_before_any_io() {
    let (lock_id, long) = (generate_lock_id(), long_key());
    refused_before_any_io(&[
        vec!["release", "--lock-id", "bad"],
        vec!["release", "--permit", "--key", &long, "--lock-id", &lock_id],
    ]);
}

#[test]
fn extend_checks_its_input_before_any_io() {
    let (lock_id, long) = (generate_lock_id(), long_key());
    refused_before_any_io(&[
        vec!["extend", "--lock-id", "bad", "--ttl", "30s"],
        vec!["extend", "--lock-id", &lock_id, "--ttl", "318y"],
        vec![
            "extend",
            "--permit",
            "--key",
            &long,
            "--lock-id",
            &lock_id,
            "--ttl",
            "30s",
        ],
    ]);
}

/// `run --ttl 1ms`: a valid lease, but too short for `run`, which renews it every third of
/// `--ttl` minus `--grace`, and no renewal interval fits below 1 ms.
#[test]
fn run_checks_its_input_before_any_io() {
    let (key, long) = (unique("input-run"), long_key());
    refused_before_any_io(&[
        vec!["run", "--key", &long, "--", "true"],
        vec!["run", "--key", &key, "--ttl", "1ms", "--", "true"],
        vec!["run", "--key", &key, "--ttl", "318y", "--", "true"],
        vec![
            "run",
            "--key",
            &key,
            "--permits",
            "2",
            "--ttl",
            "1ms",
            "--",
            "true",
        ],
    ]);
}

/// `break`: the key, the lock id, the delay and the reason are checked first; `--shared` and
/// `--permits` exclude each other, and `--permits` is a number from 1 to 1000.
#[test]
fn break_checks_its_input_before_any_io() {
    let (key, long) = (unique("input-break"), long_key());
    let too_long = "r".repeat(300);
    refused_before_any_io(&[
        vec!["break", "--key", &long],
        vec!["break", "--key", &key, "--lock-id", "bad"],
        vec!["break", "--key", &key, "--delay", "318y"],
        vec!["break", "--key", &key, "--reason", "two\nlines"],
        vec!["break", "--key", &key, "--reason", &too_long],
        vec!["break", "--key", &key, "--shared", "--permits", "2"],
        vec!["break", "--key", &key, "--permits", "0"],
    ]);
}
