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
use std::sync::OnceLock;
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
        syncguard::generate_lock_id()
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

/// A server process under a watchdog.
pub struct Service {
    name: String,
    watchdog: Child,
    stdin: Option<ChildStdin>,
    log: PathBuf,
}

impl Service {
    /// Starts `program args` with its output in `log`.
    pub fn spawn(name: &str, program: &Path, args: &[String], log: &Path) -> Service {
        // $1 is the log, the rest the command. `read` returns when our end of the pipe closes.
        let script = r#"log="$1"; shift; "$@" >>"$log" 2>&1 & pid=$!; read _ignored; kill -TERM "$pid" 2>/dev/null; wait "$pid""#;
        let mut watchdog = Command::new("sh")
            .arg("-c")
            .arg(script)
            .arg("watchdog")
            .arg(log)
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

/// A `redis-server` of its own: no persistence, loopback only, optional password.
pub struct RedisServer {
    pub port: u16,
    password: Option<String>,
    dir: PathBuf,
    service: Option<Service>,
}

impl RedisServer {
    /// Starts a server on a free port.
    pub fn start() -> RedisServer {
        Self::start_with(None)
    }

    /// Starts a server that requires `password`.
    pub fn start_with_password(password: &str) -> RedisServer {
        Self::start_with(Some(password.to_owned()))
    }

    fn start_with(password: Option<String>) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            password,
            dir: scratch_dir("redis"),
            service: None,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let program = require_program("redis-server", "redis-server");
        let mut args: Vec<String> = [
            "--port",
            &self.port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--daemonize",
            "no",
            "--dir",
            &self.dir.to_string_lossy(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if let Some(password) = &self.password {
            args.extend(["--requirepass".to_owned(), password.clone()]);
        }
        let service = Service::spawn(
            &format!("redis-server on port {}", self.port),
            &program,
            &args,
            &self.dir.join("redis.log"),
        );
        service.await_ready(Duration::from_secs(15), || self.ping());
        self.service = Some(service);
    }

    fn ping(&self) -> bool {
        let Ok(client) = redis::Client::open(self.admin_url()) else {
            return false;
        };
        client
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
            .is_ok()
    }

    /// The URL syncguard connects with (with the password, if any).
    pub fn url(&self) -> String {
        self.admin_url()
    }

    fn admin_url(&self) -> String {
        match &self.password {
            Some(password) => format!("redis://:{password}@127.0.0.1:{}/", self.port),
            None => format!("redis://127.0.0.1:{}/", self.port),
        }
    }

    /// A plain connection for looking at (or tampering with) what syncguard stored.
    pub fn connection(&self) -> redis::Connection {
        redis::Client::open(self.admin_url())
            .and_then(|client| client.get_connection_with_timeout(Duration::from_secs(5)))
            .expect("connect to the test Redis")
    }

    /// Stops the server (its data is gone: no persistence).
    pub fn stop(&mut self) {
        if let Some(mut service) = self.service.take() {
            service.stop();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One server shared by every test of a binary that needs no server of its own. It lives until
/// the test process exits, which stops it.
pub fn shared_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}
