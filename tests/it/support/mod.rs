//! Real servers for the integration tests, started by the tests themselves on private ports.
//!
//! Each server runs under a small watchdog shell whose stdin is a pipe from the test process:
//! when the `Service` is dropped, or the test process exits for any reason, the pipe closes and
//! the watchdog stops the server. Nothing is left running.
//!
//! A missing server program fails the test with instructions (`bash .ci/run` installs them):
//! tests never skip silently.

#![allow(dead_code)]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::time::{Duration, Instant};

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .expect("a free local port")
}

/// A fresh directory for one server's files, under cargo's per-target temporary directory.
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!(
        "{name}-{}-{}",
        std::process::id(),
        syncguard::driver::generate_lock_id()
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory");
    dir
}

/// The path of `program`, or a test failure that says how to get it.
pub fn require_program(program: &str, package: &str) -> PathBuf {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|candidate| candidate.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "`{program}` is not installed, so these tests cannot run. `bash .ci/run` installs \
             what the tests need; or install the Debian package `{package}`."
        )
    })
}

/// The timeouts of every backend the tests share (and of the plain clients that look at what
/// they stored): a hang guard only, far above what a loaded machine takes to answer a local
/// server, so that no test depends on how fast a server answers. Tests of timeouts set short
/// ones of their own, and only where no answer is the point.
pub const PATIENT: Duration = Duration::from_secs(30);

/// The timeouts of backends in fault tests, where calls into a black hole or a stopped server
/// must end within them: still far above what a loaded machine takes to answer a healthy local
/// server (the calls before and after the fault must not be cut off), and short enough that
/// several such calls fit in [`within_a_minute`].
pub const BRISK: Duration = Duration::from_secs(5);

/// Runs `call` on another thread and fails the test if it has not returned after a minute:
/// a hang shows up as a failure, not as a stuck test run.
pub fn within_a_minute<T: Send + 'static>(call: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(call());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .expect("the call hung instead of failing within its timeouts")
}

/// A server process under a watchdog.
pub struct Service {
    name: String,
    watchdog: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl Service {
    /// Starts `program args` with its output in `log`; stopping sends SIGTERM.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Service {
        Self::spawn_with_stop_signal(name, program, args, log, "TERM")
    }

    /// Starts `program args` with its output in `log`; stopping sends `signal` (e.g. `INT`).
    pub fn spawn_with_stop_signal(
        name: &str,
        program: &Path,
        args: &[String],
        log: &Path,
        signal: &str,
    ) -> Service {
        // $1 the log, $2 the stop signal, the rest the command. `read` returns when our end of
        // the pipe closes: on stop(), on drop, or when the test process exits.
        let script = r#"log="$1"; sig="$2"; shift 2; "$@" >>"$log" 2>&1 & pid=$!; read _ignored; kill -"$sig" "$pid" 2>/dev/null; wait "$pid""#;
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("watchdog")
            .arg(log)
            .arg(signal)
            .arg(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("could not start {name}: {e}"));
        let stdin = watchdog.stdin.take();
        Service {
            name: name.to_owned(),
            watchdog,
            stdin,
            log: log.to_owned(),
        }
    }

    /// Stops the server and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut stdin) = self.stdin.take() {
            let _ = stdin.write_all(b"stop\n");
        }
        let _ = self.watchdog.wait();
    }

    /// The last lines the server logged, for failure messages.
    pub fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// Waits until `ready` holds, or fails the test with the server's log.
    pub fn await_ready(&self, limit: Duration, mut ready: impl FnMut() -> bool) {
        let deadline = Instant::now() + limit;
        while !ready() {
            assert!(
                Instant::now() < deadline,
                "{} did not become ready within {limit:?}; its log:\n{}",
                self.name,
                self.log_tail()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A server's scratch directory and, while it runs, its process: both go when it is dropped.
pub struct Instance {
    dir: PathBuf,
    service: Option<Service>,
}

impl Instance {
    /// A fresh scratch directory (see [`scratch_dir`]), nothing running yet.
    pub fn new(name: &str) -> Instance {
        Instance {
            dir: scratch_dir(name),
            service: None,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes charge of the started `service`.
    pub fn running(&mut self, service: Service) {
        self.service = Some(service);
    }

    /// Stops the server, if it runs, and waits for it to exit.
    pub fn stop(&mut self) {
        if let Some(mut service) = self.service.take() {
            service.stop();
        }
    }

    /// The last lines the server logged, for failure messages.
    pub fn log_tail(&self) -> String {
        self.service
            .as_ref()
            .map(Service::log_tail)
            .unwrap_or_default()
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

pub mod capture_log;
pub mod child;
#[cfg(feature = "redis")]
pub mod failover;
mod faults;
#[allow(unused_imports)]
pub use faults::*;
#[cfg(feature = "firestore")]
mod firestore_faults;
#[cfg(feature = "firestore")]
#[allow(unused_imports)]
pub use firestore_faults::*;
#[cfg(feature = "firestore")]
mod firestore_server;
#[cfg(feature = "firestore")]
#[allow(unused_imports)]
pub use firestore_server::*;
#[cfg(feature = "firestore")]
pub mod http;
#[cfg(feature = "firestore")]
pub mod jwt;
pub mod lease_audit;
mod locks;
#[allow(unused_imports)]
pub use locks::*;
#[cfg(feature = "postgres")]
mod pgbouncer_server;
#[cfg(feature = "postgres")]
#[allow(unused_imports)]
pub use pgbouncer_server::*;
#[cfg(feature = "postgres")]
mod postgres_server;
#[cfg(feature = "postgres")]
#[allow(unused_imports)]
pub use postgres_server::*;
#[cfg(feature = "postgres")]
mod postgres_ways;
#[cfg(feature = "postgres")]
#[allow(unused_imports)]
pub use postgres_ways::*;
pub mod proxy;
#[cfg(feature = "redis")]
mod redis_cluster;
#[cfg(feature = "redis")]
#[allow(unused_imports)]
pub use redis_cluster::*;
#[cfg(feature = "redis")]
mod redis_sentinel;
#[cfg(feature = "redis")]
#[allow(unused_imports)]
pub use redis_sentinel::*;
#[cfg(feature = "redis")]
mod redis_server;
#[cfg(feature = "redis")]
#[allow(unused_imports)]
pub use redis_server::*;
#[cfg(feature = "redis")]
pub mod redis_topology;
#[cfg(any(feature = "redis", feature = "postgres"))]
pub mod server_store;
#[cfg(feature = "redis")]
pub mod stopped;
mod test_ca;
#[allow(unused_imports)]
pub use test_ca::*;
#[cfg(feature = "firestore")]
pub mod tls_proxy;
