//! `syncguard run --metrics-file PATH` (issue 32, item 3): however the run ends — ran, skipped
//! because the lock is held, lost, ended by a signal, or with a file that cannot be written —
//! the file holds the run's figures in the Prometheus text format (every gauge with its
//! `# HELP` and `# TYPE` lines), the temporary it was written through is gone, and the exit
//! code is the one `run` has without the flag.

use std::collections::BTreeMap;
use std::path::Path;

use crate::cli::{
    HELD_TTL, acquire, delete_redis_lock, pg_url, read, redis_url, release, scratch_and_key, sg,
    start_run, str_field,
};

/// Every gauge the file holds.
const GAUGES: [&str; 7] = [
    "syncguard_run_acquired",
    "syncguard_run_wait_seconds",
    "syncguard_run_seconds",
    "syncguard_run_exit_code",
    "syncguard_run_lost",
    "syncguard_run_end_timestamp_seconds",
    "syncguard_run_last_success_timestamp_seconds",
];

on_redis_and_postgres!(a_run_that_ran_then_one_skipped);

/// The gauges of `key` in a metrics file, by name; fails unless each has its `# HELP` and
/// `# TYPE … gauge` lines and one sample labelled exactly `{key="…"}` (escaped).
fn parse(text: &str, key: &str) -> BTreeMap<String, f64> {
    let escaped = key
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let labels = format!("{{key=\"{escaped}\"}}");
    let mut values = BTreeMap::new();
    for name in GAUGES {
        assert!(
            text.lines()
                .any(|line| line.starts_with(&format!("# HELP {name} "))
                    && line.len() > name.len() + 8),
            "no HELP line for {name}:\n{text}"
        );
        assert!(
            text.lines()
                .any(|line| line == format!("# TYPE {name} gauge")),
            "no TYPE line for {name}:\n{text}"
        );
        let prefix = format!("{name}{labels} ");
        let samples: Vec<&str> = text
            .lines()
            .filter_map(|line| line.strip_prefix(&prefix))
            .collect();
        let [sample] = samples[..] else {
            panic!("expected one sample of {name}{labels}:\n{text}");
        };
        let value: f64 = sample
            .parse()
            .unwrap_or_else(|e| panic!("{name}: {sample:?} is not a number ({e}):\n{text}"));
        values.insert(name.to_owned(), value);
    }
    let samples = text.lines().filter(|line| !line.starts_with('#')).count();
    assert_eq!(samples, GAUGES.len(), "only the known gauges:\n{text}");
    values
}

/// The file at `path`, parsed for `key`; and nothing else in its folder (the temporary it was
/// written through is gone).
pub(crate) fn metrics(path: &Path, key: &str) -> BTreeMap<String, f64> {
    let text = read(path);
    assert!(!text.is_empty(), "{} was not written", path.display());
    expect_alone(path);
    parse(&text, key)
}

/// Fails unless `path` is the only entry of its folder.
fn expect_alone(path: &Path) {
    let folder = path.parent().expect("a folder");
    let entries: Vec<String> = std::fs::read_dir(folder)
        .expect("read the folder")
        .map(|entry| {
            entry
                .expect("an entry")
                .file_name()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    let name = path
        .file_name()
        .expect("a file name")
        .to_string_lossy()
        .into_owned();
    assert_eq!(entries, vec![name], "only the file is left in its folder");
}

fn gauge(values: &BTreeMap<String, f64>, name: &str) -> f64 {
    values[name]
}

/// Checks the figures every run has: exit code, acquired, lost.
pub(crate) fn expect_figures(
    values: &BTreeMap<String, f64>,
    exit_code: u8,
    acquired: bool,
    lost: bool,
) {
    assert_eq!(
        gauge(values, "syncguard_run_exit_code"),
        f64::from(exit_code),
        "{values:?}"
    );
    assert_eq!(
        gauge(values, "syncguard_run_acquired"),
        f64::from(u8::from(acquired)),
        "{values:?}"
    );
    assert_eq!(
        gauge(values, "syncguard_run_lost"),
        f64::from(u8::from(lost)),
        "{values:?}"
    );
    assert!(
        gauge(values, "syncguard_run_wait_seconds") >= 0.0,
        "{values:?}"
    );
    assert!(
        gauge(values, "syncguard_run_end_timestamp_seconds") > 1.0e9,
        "{values:?}"
    );
}

/// A run that ran its command (exit 0), then one that found the lock held (exit 75): the
/// second keeps the first's success time. The key has a quote and a backslash, escaped.
fn a_run_that_ran_then_one_skipped(url: &str) {
    let (scratch, base) = scratch_and_key("metrics-ran");
    let key = format!("{base}\"q\\b");
    let file = scratch.path("job.prom");
    let file_arg = scratch.arg("job.prom");
    let run_true = || {
        sg(
            url,
            &[
                "run",
                "--key",
                &key,
                "--metrics-file",
                &file_arg,
                "--",
                "true",
            ],
        )
    };

    let out = run_true();
    out.expect_code(0);
    let ran = metrics(&file, &key);
    expect_figures(&ran, 0, true, false);
    assert!(gauge(&ran, "syncguard_run_seconds") >= 0.0, "{ran:?}");
    let ended = gauge(&ran, "syncguard_run_end_timestamp_seconds");
    assert_eq!(
        gauge(&ran, "syncguard_run_last_success_timestamp_seconds"),
        ended,
        "a success is its own last success"
    );

    let holder = acquire(url, &key, &[]);
    let out = run_true();
    out.expect_code(75);
    let skipped = metrics(&file, &key);
    expect_figures(&skipped, 75, false, false);
    assert_eq!(gauge(&skipped, "syncguard_run_seconds"), 0.0, "{skipped:?}");
    assert!(gauge(&skipped, "syncguard_run_end_timestamp_seconds") >= ended);
    assert_eq!(
        gauge(&skipped, "syncguard_run_last_success_timestamp_seconds"),
        ended,
        "the last success is carried over"
    );
    release(url, str_field(&holder, "lockId"));
}

/// A lease deleted under the command: 76, lost 1; the command ran, and no success is known.
#[test]
fn a_lost_lease_is_recorded() {
    let (scratch, key) = scratch_and_key("metrics-lost");
    // A folder of its own: the command's pid file is beside it.
    std::fs::create_dir(scratch.path("prom")).expect("create the folder");
    let file = scratch.path("prom/job.prom");
    let (running, _pid) = start_run(
        &redis_url(),
        &key,
        &[
            "--ttl",
            HELD_TTL,
            "--metrics-file",
            &scratch.arg("prom/job.prom"),
        ],
        &scratch.path("pid"),
        "exec sleep 30",
        &[],
    );
    assert_eq!(delete_redis_lock(&key), 1);
    running.finish().expect_code(76);
    let values = metrics(&file, &key);
    expect_figures(&values, 76, true, true);
    assert_eq!(
        gauge(&values, "syncguard_run_last_success_timestamp_seconds"),
        0.0
    );
}

/// SIGTERM to `run` while the command runs: the command's status (143) is recorded.
#[test]
fn a_run_ended_by_a_signal_is_recorded() {
    let (scratch, key) = scratch_and_key("metrics-signal");
    // A folder of its own: the command's pid file is beside it.
    std::fs::create_dir(scratch.path("prom")).expect("create the folder");
    let file = scratch.path("prom/job.prom");
    let (running, _pid) = start_run(
        &redis_url(),
        &key,
        &["--metrics-file", &scratch.arg("prom/job.prom")],
        &scratch.path("pid"),
        "exec sleep 30",
        &[],
    );
    running.terminate().expect_code(143);
    expect_figures(&metrics(&file, &key), 143, true, false);
}

/// A file that cannot be written (its folder is missing; or it is a folder, so the rename
/// fails after the temporary was written) is a warning, with `-q` too; the exit code is the
/// run's, and no temporary is left.
#[test]
fn an_unwritable_file_is_a_warning_only() {
    let url = redis_url();
    let (scratch, key) = scratch_and_key("metrics-unwritable");
    let missing = scratch.arg("missing/job.prom");
    let folder = scratch.path("job.prom");
    std::fs::create_dir(&folder).expect("create the folder in the file's place");
    for path in [missing.as_str(), &scratch.arg("job.prom")] {
        for quiet in [false, true] {
            let mut args = vec!["run", "--key", &key, "--metrics-file", path];
            if quiet {
                args.push("-q");
            }
            args.extend(["--", "sh", "-c", "exit 7"]);
            let out = sg(&url, &args);
            out.expect_code(7);
            out.expect_stderr(
                "warning: could not write --metrics-file",
                "the failure is a warning",
            );
        }
    }
    assert!(!Path::new(&missing).exists());
    expect_alone(&folder);
    assert_eq!(
        std::fs::read_dir(&folder).expect("read").count(),
        0,
        "nothing was written into the folder"
    );
}

/// `--max-runtime`: 124 is recorded, the command ran.
#[test]
fn a_run_that_reached_max_runtime_is_recorded() {
    let (scratch, key) = scratch_and_key("metrics-max-runtime");
    let file = scratch.path("job.prom");
    let out = sg(
        &redis_url(),
        &[
            "run",
            "--key",
            &key,
            "--max-runtime",
            "100ms",
            "--metrics-file",
            &scratch.arg("job.prom"),
            "--",
            "sleep",
            "30",
        ],
    );
    out.expect_code(124);
    let values = metrics(&file, &key);
    expect_figures(&values, 124, true, false);
    assert!(gauge(&values, "syncguard_run_seconds") > 0.0, "{values:?}");
}
