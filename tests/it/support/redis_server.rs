//! `redis-server` instances for the tests.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use syncguard::redis::{RedisBackend, RedisBuilder};

use super::redis_topology::data_node_args;
use super::{BRISK, Instance, PATIENT, Service, free_port, require_program};

/// A `redis-server` of its own: no persistence, loopback only, optional password, optionally
/// TLS only.
pub struct RedisServer {
    pub port: u16,
    password: Option<String>,
    /// Certificate, key and CA (PEM files) of a TLS-only server.
    tls: Option<[PathBuf; 3]>,
    instance: Instance,
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

    /// Starts a server that speaks TLS only, presenting `cert` (with `key`); `ca` is what
    /// Redis insists on for client certificates, which it does not ask for.
    pub fn start_tls(cert: &Path, key: &Path, ca: &Path) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            password: None,
            tls: Some([cert.to_owned(), key.to_owned(), ca.to_owned()]),
            instance: Instance::new("redis-tls"),
        };
        server.launch();
        server
    }

    fn start_with(password: Option<String>) -> RedisServer {
        let mut server = RedisServer {
            port: free_port(),
            password,
            tls: None,
            instance: Instance::new("redis"),
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let program = require_program("redis-server", "redis-server");
        let port = self.port.to_string();
        // A TLS server listens on its TLS port alone.
        let plain_port = if self.tls.is_some() { 0 } else { self.port };
        let mut args = data_node_args(plain_port, self.instance.dir());
        if let Some(password) = &self.password {
            args.extend(["--requirepass".to_owned(), password.clone()]);
        }
        if let Some([cert, key, ca]) = &self.tls {
            args.extend(["--tls-port".to_owned(), port.clone()]);
            for (option, file) in [
                ("--tls-cert-file", cert),
                ("--tls-key-file", key),
                ("--tls-ca-cert-file", ca),
            ] {
                args.extend([option.to_owned(), file.to_string_lossy().into_owned()]);
            }
            args.extend(["--tls-auth-clients".to_owned(), "no".to_owned()]);
        }
        let service = Service::spawn(
            &format!("redis-server on port {}", self.port),
            &program,
            &args,
            &self.instance.dir().join("redis.log"),
        );
        service.await_ready(Duration::from_secs(15), || self.ping());
        self.instance.running(service);
    }

    fn ping(&self) -> bool {
        if self.tls.is_some() {
            // Listening is enough: the tests themselves speak TLS to it.
            return std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok();
        }
        let Ok(client) = redis::Client::open(self.admin_url()) else {
            return false;
        };
        client
            .get_connection_with_timeout(Duration::from_millis(200))
            .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
            .is_ok()
    }

    /// The URL syncguard connects with (with the password, if any); `rediss://localhost:…/`
    /// for a TLS server.
    pub fn url(&self) -> String {
        match self.tls {
            Some(_) => format!("rediss://localhost:{}/", self.port),
            None => self.admin_url(),
        }
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
            .and_then(|client| client.get_connection_with_timeout(PATIENT))
            .expect("connect to the test Redis")
    }

    /// Stops the server (its data is gone: no persistence).
    pub fn stop(&mut self) {
        self.instance.stop();
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

/// One server shared by every test, of every area, that needs no server of its own. It lives until
/// the test process exits, which stops it.
pub fn shared_redis() -> &'static RedisServer {
    static SERVER: OnceLock<RedisServer> = OnceLock::new();
    SERVER.get_or_init(RedisServer::start)
}

/// A backend on [`shared_redis`], whose timeouts are [`PATIENT`] hang guards.
pub fn shared_redis_backend() -> RedisBackend {
    patient_redis(&shared_redis().url())
        .build()
        .expect("connect to the test Redis")
}

/// A builder for a backend on `url` whose timeouts are [`PATIENT`] hang guards.
pub fn patient_redis(url: &str) -> RedisBuilder {
    RedisBackend::builder()
        .url(url)
        .connect_timeout(PATIENT)
        .read_timeout(PATIENT)
        .write_timeout(PATIENT)
        .pool_timeout(PATIENT)
}

/// A backend on [`shared_redis`] in `layout`, with a key prefix of its own (returned with it):
/// its namespace holds only what the test puts there.
pub fn shared_redis_namespace(layout: syncguard::redis::KeyLayout) -> (RedisBackend, String) {
    let prefix = format!(
        "ns-{}",
        syncguard::driver::generate_lock_id().replace(['-', '_'], "x")
    );
    let backend = patient_redis(&shared_redis().url())
        .key_prefix(&prefix)
        .layout(layout)
        .build()
        .expect("connect to the test Redis");
    (backend, prefix)
}

/// A backend on [`shared_redis`], and a plain connection for looking at (or tampering with)
/// what it stored.
pub fn shared_redis_with_connection() -> (RedisBackend, redis::Connection) {
    (shared_redis_backend(), shared_redis().connection())
}

/// [`shared_redis`]'s clock, read over a connection of its own.
pub fn shared_redis_now_ms() -> i64 {
    redis_now_ms(&mut shared_redis().connection())
}

/// Redis' clock (`TIME`), in Unix ms.
pub fn redis_now_ms(conn: &mut redis::Connection) -> i64 {
    let (secs, micros): (i64, i64) = redis::cmd("TIME").query(conn).unwrap();
    secs * 1000 + micros / 1000
}

/// A builder for a backend on `url` for fault tests: [`BRISK`] to connect, read, write or wait
/// for a pooled connection.
pub fn impatient_redis(url: &str) -> RedisBuilder {
    RedisBackend::builder()
        .url(url)
        .connect_timeout(BRISK)
        .read_timeout(BRISK)
        .write_timeout(BRISK)
        .pool_timeout(BRISK)
}
