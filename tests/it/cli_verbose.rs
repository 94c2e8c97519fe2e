//! `syncguard -v` (issue 32, item 4): with it, each backend operation is a line on stderr — a
//! contended acquisition attempt, a renewal; without it, nothing more than before; with `-q`
//! too, the operations still print while the skip's note does not.

use std::fs::File;

use crate::cli::{
    WAIT_FOR_GO_FILE, acquire, pg_url, redis_url, release, scratch_and_key, sg, start_run,
    str_field, wait_for,
};

/// What `-v` prints for an attempt that found the lock held.
const REFUSED_ATTEMPT: &str = r#""type":"acquire","result":"fail","reason":"locked""#;

/// What `-v` prints for a renewal the backend confirmed.
const RENEWED: &str = r#""type":"extend","result":"ok""#;

on_redis_and_postgres!(a_contended_run_shows_its_attempt_with_v_only);

fn a_contended_run_shows_its_attempt_with_v_only(url: &str) {
    let (_scratch, key) = scratch_and_key("verbose-contended");
    let holder = acquire(url, &key, &[]);

    let verbose = sg(url, &["-v", "run", "--key", &key, "--", "true"]);
    verbose.expect_code(75);
    verbose.expect_stderr(REFUSED_ATTEMPT, "-v shows the refused attempt");
    verbose.expect_stderr(
        "is held; not running the command",
        "the note is still there",
    );
    assert!(
        verbose
            .stderr
            .lines()
            .filter(|line| line.starts_with("DEBUG "))
            .all(|line| !line.contains(&key)),
        "events carry hashes, not the key: {}",
        verbose.context()
    );

    let plain = sg(url, &["run", "--key", &key, "--", "true"]);
    plain.expect_code(75);
    assert_eq!(
        plain.stderr.lines().count(),
        1,
        "without -v, only the note: {}",
        plain.context()
    );
    assert!(!plain.stderr.contains("\"type\""), "{}", plain.context());

    // -q silences the skip, -v still prints what it saw.
    let both = sg(url, &["run", "-q", "-v", "--key", &key, "--", "true"]);
    both.expect_code(75);
    both.expect_stderr(REFUSED_ATTEMPT, "-q -v shows the attempt");
    assert!(
        !both.stderr.contains("not running the command"),
        "-q -v: no note: {}",
        both.context()
    );
    assert!(
        sg(url, &["run", "-q", "--key", &key, "--", "true"])
            .expect_code(75)
            .stderr
            .is_empty()
    );
    release(url, str_field(&holder, "lockId"));
}

/// A renewal while the command runs is a line with `-v`: the test waits for it, then lets the
/// command end.
#[test]
fn a_renewal_shows_with_v() {
    let (scratch, key) = scratch_and_key("verbose-renewal");
    let go = scratch.arg("go");
    let (mut running, _pid) = start_run(
        &redis_url(),
        &key,
        &["-v", "--ttl", "3s"],
        &scratch.path("pid"),
        WAIT_FOR_GO_FILE,
        &[&go],
    );
    wait_for("a renewal line", || {
        assert!(running.is_running(), "{}", running.stderr_so_far());
        running.stderr_so_far().contains(RENEWED)
    });
    File::create(&go).expect("create the go file");
    let out = running.finish();
    out.expect_code(0);
    out.expect_stderr(r#""type":"release","result":"ok""#, "the release shows");
}
