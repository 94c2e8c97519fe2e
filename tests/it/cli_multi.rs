//! `syncguard run`/`acquire` with `--key` repeated (issue 35), on every store and topology: the
//! keys are held together, all or none, with every key and fence in the command's environment,
//! one per line; `acquire` prints a line per key and `release --acquired` gives them all back;
//! bad usage exits 2 before any backend is reached.
//!
//! The issue's "done when": six processes loop for 12 s over `run --key a --key b`, `--key b
//! --key a`, `--key a` and `--key b`; each job proves it is alone in each of its keys by making
//! a directory per key (`mkdir` fails if another job is inside), so two jobs in one key fail
//! the test, as does any run that does not exit 0 within its generous `--wait`. Nothing is
//! timed; the runs per variant are printed.

use std::process::Stdio;
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value as Json, json};
use syncguard::driver::hash_key;

use crate::cli::{
    HELD_TTL, Scratch, Started, WAIT_FOR_GO_FILE, delete_redis_lock, expect_lost, expect_unlocked,
    read, redis_url, scratch_and_key, start_run, str_field, syncguard, wait_for,
};
use crate::cli_store::Store;
use crate::support;

on_every_store!(six_processes_over_two_keys_never_share_a_key);

/// What the command prints and passes on for several keys is the command's own, the same on
/// every store (each store's set acquisition has its own tests): checked once, on Redis.
mod on_redis {
    use crate::cli_store::Store;

    #[test]
    fn run_lists_every_key_and_fence_one_per_line() {
        super::run_lists_every_key_and_fence_one_per_line(&Store::redis());
    }

    #[test]
    fn acquire_prints_a_line_per_key_and_release_takes_them_back() {
        super::acquire_prints_a_line_per_key_and_release_takes_them_back(&Store::redis());
    }
}

/// How long the six processes loop.
const LOOPING: Duration = Duration::from_secs(12);
/// The processes of the "done when" test.
const PROCESSES: usize = 6;

/// A job in the keys named after `$1` (the scratch folder): a directory per key, made while
/// it is inside (`mkdir` fails if another job is: exit 99, noted in `$1/overlaps`), a moment's
/// stay, then out.
const ALONE_JOB: &str = r#"dir=$1; shift
for k in "$@"; do
  mkdir "$dir/$k.inside" 2>/dev/null || { echo "$k" >> "$dir/overlaps"; exit 99; }
done
sleep 0.05
for k in "$@"; do rmdir "$dir/$k.inside"; done"#;

/// The four variants, as (name, labels of its keys in the order given).
const VARIANTS: [(&str, &[&str]); 4] = [
    ("--key a --key b", &["a", "b"]),
    ("--key b --key a", &["b", "a"]),
    ("--key a", &["a"]),
    ("--key b", &["b"]),
];

/// Two keys of this test's own; on a Redis Cluster, in different hash slots (so that the set
/// is not one script on one node).
fn two_keys(store: &Store, name: &str) -> (String, String) {
    let a = support::unique(&format!("{name}-a"));
    if !store.url.starts_with("redis-cluster://") {
        return (a, support::unique(&format!("{name}-b")));
    }
    let backend = syncguard::redis::RedisBackend::connect(&store.url).expect("connect");
    let cluster = support::shared_cluster();
    let slot = |key: &str| cluster.key_slot(&backend.lock_key(key).expect("a lock key"));
    let a_slot = slot(&a);
    loop {
        let b = support::unique(&format!("{name}-b"));
        if slot(&b) != a_slot {
            return (a, b);
        }
    }
}

fn six_processes_over_two_keys_never_share_a_key(store: &Store) {
    let scratch = Scratch::new("multi");
    let (a, b) = two_keys(store, "multi-six");
    let dir = scratch.arg("");
    let dir = dir.trim_end_matches('/');
    let key_of = |label: &str| if label == "a" { a.clone() } else { b.clone() };
    let began = Instant::now();
    let results: Vec<([usize; 4], Vec<String>)> = thread::scope(|scope| {
        let workers: Vec<_> = (0..PROCESSES)
            .map(|process| {
                let key_of = &key_of;
                scope.spawn(move || {
                    let mut runs = [0usize; 4];
                    let mut failures = Vec::new();
                    let mut turn = process % VARIANTS.len();
                    while began.elapsed() < LOOPING {
                        let (name, labels) = VARIANTS[turn];
                        let keys: Vec<String> = labels.iter().map(|label| key_of(label)).collect();
                        let mut args = vec!["run"];
                        for key in &keys {
                            args.extend_from_slice(&["--key", key]);
                        }
                        args.extend_from_slice(&["--wait", "60s", "--", "sh", "-c", ALONE_JOB]);
                        args.extend_from_slice(&["sh", dir]);
                        args.extend_from_slice(labels);
                        let output = store
                            .command(&args)
                            .stdout(Stdio::null())
                            .output()
                            .expect("run syncguard");
                        runs[turn] += 1;
                        if output.status.code() != Some(0) {
                            failures.push(format!(
                                "process {process}, {name}: {:?}: {}",
                                output.status,
                                String::from_utf8_lossy(&output.stderr)
                            ));
                        }
                        turn = (turn + 1) % VARIANTS.len();
                    }
                    (runs, failures)
                })
            })
            .collect();
        workers
            .into_iter()
            .map(|worker| worker.join().expect("a process thread panicked"))
            .collect()
    });
    let mut runs = [0usize; 4];
    let mut failures = Vec::new();
    for (each, failed) in results {
        for (total, n) in runs.iter_mut().zip(each) {
            *total += n;
        }
        failures.extend(failed);
    }
    let per_variant: Vec<String> = VARIANTS
        .iter()
        .zip(runs)
        .map(|((name, _), n)| format!("{name}: {n}"))
        .collect();
    println!(
        "{} runs by {PROCESSES} processes in {:.1} s ({})",
        runs.iter().sum::<usize>(),
        began.elapsed().as_secs_f64(),
        per_variant.join(", ")
    );
    let overlaps = read(&scratch.path("overlaps"));
    assert!(
        overlaps.is_empty(),
        "a job found another inside its key {} times (keys: {:?}…)",
        overlaps.lines().count(),
        overlaps.lines().take(8).collect::<Vec<_>>()
    );
    assert!(
        failures.is_empty(),
        "{} runs failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn run_lists_every_key_and_fence_one_per_line(store: &Store) {
    let scratch = Scratch::new("multi-env");
    let (a, b) = two_keys(store, "multi-env");
    let mut sorted = [a.clone(), b.clone()];
    sorted.sort();
    // As docs/cli.md reads them.
    let job = format!(
        r#"printf '%s' "$SYNCGUARD_KEY" > "$1/keys"
printf '%s' "$SYNCGUARD_FENCE" > "$1/fences"
printf '%s' "$SYNCGUARD_LOCK_ID" > "$1/ids"
printf '%s\n' "$SYNCGUARD_FENCE" | while read -r fence; do echo "fence $fence" >> "$1/read"; done
touch "$1/ready"
set -- "$1/go"
{WAIT_FOR_GO_FILE}"#
    );
    let dir = scratch.arg("");
    let mut run = Started(
        store
            .command(&[
                "run", "--key", &b, "--key", &a, "--key", &b, "--", "sh", "-c", &job, "sh", &dir,
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start syncguard run"),
    );
    wait_for("the job to start", || scratch.path("ready").exists());
    assert_eq!(
        read(&scratch.path("keys")),
        sorted.join("\n"),
        "one per line, in byte order"
    );
    let fences = read(&scratch.path("fences"));
    let fences: Vec<&str> = fences.split('\n').collect();
    let ids = read(&scratch.path("ids"));
    let ids: Vec<&str> = ids.split('\n').collect();
    assert_eq!((fences.len(), ids.len()), (2, 2), "{fences:?} {ids:?}");
    let read_back: Vec<String> = fences
        .iter()
        .map(|fence| format!("fence {fence}\n"))
        .collect();
    assert_eq!(read(&scratch.path("read")), read_back.concat());
    for ((key, fence), id) in sorted.iter().zip(&fences).zip(&ids) {
        let status = store.status(key);
        assert_eq!(str_field(&status, "fence"), *fence, "{key}: {status}");
        assert_eq!(
            str_field(&status, "lockIdHash"),
            hash_key(id),
            "{key}: {status}"
        );
    }
    std::fs::write(scratch.path("go"), "").expect("write the go file");
    let deadline = Instant::now() + Duration::from_secs(30);
    let status = loop {
        if let Some(status) = run.0.try_wait().expect("try_wait") {
            break status;
        }
        assert!(Instant::now() < deadline, "run did not end");
        thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(0));
    for key in &sorted {
        assert_eq!(store.status(key), Json::Null, "{key} released");
    }
}

fn acquire_prints_a_line_per_key_and_release_takes_them_back(store: &Store) {
    let (a, b) = two_keys(store, "multi-acquire");
    let mut sorted = [a.clone(), b.clone()];
    sorted.sort();
    let (code, out) = store.output(&["acquire", "--key", &b, "--key", &a, "--ttl", "1m"]);
    assert_eq!(code, 0, "{out}");
    let lines: Vec<Json> = out
        .lines()
        .map(|line| serde_json::from_str(line).expect("a JSON line"))
        .collect();
    assert_eq!(lines.len(), 2, "{out}");
    for (line, key) in lines.iter().zip(&sorted) {
        assert_eq!(line["ok"], json!(true), "{out}");
        assert_eq!(str_field(line, "key"), key, "{out}");
        let status = store.status(key);
        assert_eq!(
            str_field(&status, "fence"),
            str_field(line, "fence"),
            "{key}"
        );
        assert_eq!(
            str_field(&status, "lockIdHash"),
            hash_key(str_field(line, "lockId")),
            "{key}"
        );
    }
    // All or none: one of the keys held keeps the other free.
    let other = support::unique("multi-acquire-other");
    let (code, refused) = store.output(&["acquire", "--key", &b, "--key", &other]);
    assert_eq!(
        (code, refused.trim()),
        (1, r#"{"ok":false,"reason":"locked"}"#)
    );
    assert_eq!(store.status(&other), Json::Null);
    let (code, extended) = store.output(&["extend", "--acquired", &out, "--ttl", "2m"]);
    assert_eq!(code, 0, "{extended}");
    let (code, released) = store.output(&["release", "--acquired", &out]);
    assert_eq!((code, released.trim()), (0, r#"{"ok":true}"#));
    for key in &sorted {
        assert_eq!(store.status(key), Json::Null, "{key} released");
    }
    let (code, again) = store.output(&["release", "--acquired", &out]);
    assert_eq!((code, again.trim()), (1, r#"{"notHeld":[1,2],"ok":false}"#));
}

/// A set is lost as a whole: one of its keys deleted under the running command ends it as a
/// single key's loss does (76), and the other key is released at the end.
#[test]
fn one_key_lost_loses_the_set() {
    let (scratch, a) = scratch_and_key("multi-lost");
    let b = support::unique("multi-lost-b");
    let (running, pid) = start_run(
        &redis_url(),
        &a,
        &["--key", &b, "--ttl", HELD_TTL],
        &scratch.path("pid"),
        "exec sleep 30",
        &[],
    );
    assert_eq!(delete_redis_lock(&b), 1);
    expect_lost(running, pid);
    expect_unlocked(&redis_url(), &a);
    expect_unlocked(&redis_url(), &b);
}

/// Several keys where they are not supported, or a set the library refuses: exit 2 before any
/// backend is reached (the URL's port has no server).
#[test]
fn bad_sets_are_bad_usage_before_any_io() {
    let too_many: Vec<String> = (0..65).map(|n| format!("k{n}")).collect();
    let mut sixty_five = vec!["run"];
    for key in &too_many {
        sixty_five.extend_from_slice(&["--key", key]);
    }
    sixty_five.extend_from_slice(&["--", "true"]);
    let cases: [&[&str]; 8] = [
        &[
            "run",
            "--key",
            "a",
            "--key",
            "b",
            "--permits",
            "2",
            "--",
            "true",
        ],
        &["run", "--key", "a", "--key", "b", "-s", "--", "true"],
        &["run", "--key", "a", "--key", "b\nc", "--", "true"],
        &["run", "--key", "a", "--key", "", "--", "true"],
        &sixty_five,
        &["acquire", "--key", "a", "--key", "b", "--permits", "2"],
        &["release", "--acquired", r#"{"ok":false,"reason":"locked"}"#],
        &["release", "--acquired", "{}", "--permit", "--key", "a"],
    ];
    for args in cases {
        let output = syncguard(&[&["--url", "redis://127.0.0.1:1/"], args].concat())
            .output()
            .expect("run syncguard");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.starts_with("error: InvalidArgument: "),
            "{args:?}: {stderr}"
        );
    }
}
