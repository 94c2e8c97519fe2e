//! `syncguard leader`: the leader of an election as one JSON object (`null`, exit 1, for
//! nobody), and `--watch`, which prints a line at each change until SIGTERM (exit 0).

use std::io::{BufRead, BufReader};
use std::process::Stdio;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use serde_json::{Value, json};
use syncguard::Locker;
use syncguard::testing::support::unique_key;

use crate::cli::syncguard;
use crate::cli::{pg_url, redis_url};

/// How long a line of `--watch` may take to come: far above its 500 ms poll.
const PATIENCE: Duration = Duration::from_secs(30);

on_redis_and_postgres!(leader_is_shown_and_followed);

/// `leader` once: null (exit 1), then the campaigner's value and term (exit 0). `--watch`:
/// the leader now, null after it resigns, the next leader with a higher term; exit 0 on
/// SIGTERM. (A proclaimed value is the same read: `leadership_contract!` checks `leader()`
/// shows it.)
fn leader_is_shown_and_followed(url: &str) {
    let name = unique_key("cli-leader");
    let once = || {
        let out = syncguard(&["--url", url, "leader", "--key", &name])
            .output()
            .expect("run syncguard leader");
        let printed: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&out.stdout));
        });
        (printed, out.status.code())
    };
    assert_eq!(once(), (Value::Null, Some(1)));
    let locker = Locker::new(syncguard::connect(url).expect("connect"));
    let leadership = locker.campaign(&name, "node-a:8080").unwrap();
    let (shown, code) = once();
    assert_eq!(code, Some(0), "{shown}");
    assert_eq!(shown["value"], json!("node-a:8080"));
    assert_eq!(shown["term"], json!(leadership.term()));
    assert!(shown["sinceMs"].as_i64() <= shown["expiresAtMs"].as_i64());
    assert_eq!(shown["expiresAtMs"], json!(leadership.expires_at_ms()));

    let mut watching = syncguard(&["--url", url, "leader", "--key", &name, "--watch"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start syncguard leader --watch");
    let (lines, printed) = mpsc::channel();
    let stdout = watching.stdout.take().expect("its stdout");
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = lines.send(line);
        }
    });
    let next = || -> Value {
        let line = printed.recv_timeout(PATIENCE).expect("a line from --watch");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
    };
    let first = next();
    assert_eq!(first["value"], json!("node-a:8080"), "{first}");
    let term = leadership.term();
    leadership.resign().unwrap();
    assert_eq!(next(), Value::Null);
    let next_leadership = locker.campaign(&name, "node-b").unwrap();
    assert!(next_leadership.term() > term);
    let elected = next();
    assert_eq!(elected["value"], json!("node-b"), "{elected}");
    assert_eq!(elected["term"], json!(next_leadership.term()));

    let sent = std::process::Command::new("kill")
        .args(["-TERM", &watching.id().to_string()])
        .status()
        .is_ok_and(|status| status.success());
    assert!(sent, "kill -TERM");
    let status = watching.wait().expect("--watch ends");
    assert_eq!(status.code(), Some(0), "{status}");
}
