//! PostgreSQL clusters for the tests.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use syncguard::driver::generate_lock_id;
use syncguard::postgres::{PostgresBackend, PostgresBuilder, TableNames, setup_schema};

use super::{BRISK, Instance, PATIENT, Service, free_port};

/// Whether this process runs as root (then servers that refuse root run as `postgres`).
pub(super) fn running_as_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .map(|out| String::from_utf8_lossy(&out.stdout).trim() == "0")
        .unwrap_or(false)
}

/// What runs `program` as the `postgres` user when we are root (`setpriv` and its arguments,
/// then `program`'s own), or as ourselves otherwise: the command and its first arguments.
pub(super) fn as_postgres_user(program: &Path) -> (PathBuf, Vec<String>) {
    if running_as_root() {
        let mut args: Vec<String> = ["--reuid=postgres", "--regid=postgres", "--init-groups"]
            .map(String::from)
            .into();
        args.push(program.to_string_lossy().into_owned());
        (PathBuf::from("setpriv"), args)
    } else {
        (program.to_owned(), Vec::new())
    }
}

/// Hands `dir` to the `postgres` user when we are root, so that a server running as it can
/// write there.
pub(super) fn give_to_postgres_user(dir: &Path) {
    if running_as_root() {
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir)
            .status()
            .expect("chown a server's directory");
        assert!(status.success(), "chown {}", dir.display());
    }
}

/// Runs `program args` to completion (as the `postgres` user when we are root), failing the
/// test with its output if it fails.
fn run_as_postgres_user(program: &Path, args: &[String]) {
    let (command, first) = as_postgres_user(program);
    let output = Command::new(command)
        .args(first)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("could not run {}: {e}", program.display()));
    assert!(
        output.status.success(),
        "{} failed:\n{}{}",
        program.display(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// The directory holding `initdb` and `postgres`: on PATH, or Debian's newest
/// `/usr/lib/postgresql/<version>/bin`.
fn postgres_bin_dir() -> PathBuf {
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .find(|dir| dir.join("initdb").is_file() && dir.join("postgres").is_file())
    });
    let debian = || {
        let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
            .ok()?
            .filter_map(|entry| Some(entry.ok()?.path().join("bin")))
            .filter(|bin| bin.join("initdb").is_file())
            .collect();
        versions.sort();
        versions.pop()
    };
    on_path.or_else(debian).unwrap_or_else(|| {
        panic!(
            "PostgreSQL's `initdb` and `postgres` are not installed, so these tests cannot run. \
             `bash .ci/run` installs what the tests need; or install the Debian package `postgresql`."
        )
    })
}

/// The role and password of the test servers.
pub const PG_USER: &str = "syncguard";
pub const PG_PASSWORD: &str = "syncguard-test-password";

/// A PostgreSQL cluster of its own: `initdb` into a scratch directory, password
/// authentication over TCP on a free port, durability off (it is thrown away).
pub struct PgServer {
    pub port: u16,
    bin: PathBuf,
    instance: Instance,
    /// `-c` settings beyond the usual ones.
    settings: Vec<String>,
}

impl PgServer {
    pub fn start() -> PgServer {
        Self::start_with(None)
    }

    /// Starts a cluster that also accepts TLS, presenting `cert` (with `key`; PEM files, copied
    /// into the cluster's directory with the key readable by the server alone).
    pub fn start_with_tls(cert: &Path, key: &Path) -> PgServer {
        Self::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&Path, &Path)>) -> PgServer {
        let bin = postgres_bin_dir();
        let instance = Instance::new("postgres");
        let dir = instance.dir();
        let password_file = dir.join("password");
        std::fs::write(&password_file, PG_PASSWORD).expect("write the password file");
        give_to_postgres_user(dir);
        run_as_postgres_user(
            &bin.join("initdb"),
            &[
                "-D".to_owned(),
                dir.join("data").to_string_lossy().into_owned(),
                "-U".to_owned(),
                PG_USER.to_owned(),
                format!("--pwfile={}", password_file.display()),
                "--auth-local=trust".to_owned(),
                "--auth-host=scram-sha-256".to_owned(),
                "--encoding=UTF8".to_owned(),
                "--locale=C".to_owned(),
                "--no-sync".to_owned(),
            ],
        );
        let mut settings = Vec::new();
        if let Some((cert, key)) = tls {
            let (cert_copy, key_copy) = (dir.join("server.crt"), dir.join("server.key"));
            std::fs::copy(cert, &cert_copy).expect("copy the server certificate");
            std::fs::copy(key, &key_copy).expect("copy the server key");
            // PostgreSQL refuses a key file others can read.
            std::fs::set_permissions(
                &key_copy,
                std::os::unix::fs::PermissionsExt::from_mode(0o600),
            )
            .expect("restrict the server key");
            give_to_postgres_user(dir);
            settings.extend([
                "ssl=on".to_owned(),
                format!("ssl_cert_file={}", cert_copy.display()),
                format!("ssl_key_file={}", key_copy.display()),
            ]);
        }
        let mut server = PgServer {
            port: free_port(),
            bin,
            instance,
            settings,
        };
        server.launch();
        server
    }

    fn launch(&mut self) {
        let dir = self.instance.dir();
        let (program, mut args) = as_postgres_user(&self.bin.join("postgres"));
        args.extend([
            "-D".to_owned(),
            dir.join("data").to_string_lossy().into_owned(),
            "-p".to_owned(),
            self.port.to_string(),
            "-k".to_owned(),
            dir.to_string_lossy().into_owned(),
        ]);
        for setting in [
            "listen_addresses=127.0.0.1",
            "fsync=off",
            "synchronous_commit=off",
            "full_page_writes=off",
            "max_connections=300",
        ]
        .into_iter()
        .chain(self.settings.iter().map(String::as_str))
        {
            args.extend(["-c".to_owned(), setting.to_owned()]);
        }
        // SIGINT is PostgreSQL's fast shutdown: it does not wait for clients to leave.
        let service = Service::spawn_with_stop_signal(
            &format!("postgres on port {}", self.port),
            &program,
            &args,
            &dir.join("postgres.log"),
            "INT",
        );
        service.await_ready(Duration::from_secs(30), || {
            self.try_client(Duration::from_millis(500)).is_ok()
        });
        self.instance.running(service);
    }

    /// `postgres://syncguard:…@localhost:<port>/postgres`.
    pub fn localhost_url(&self) -> String {
        format!(
            "postgres://{PG_USER}:{PG_PASSWORD}@localhost:{}/postgres",
            self.port
        )
    }

    /// `postgres://syncguard:…@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        format!(
            "postgres://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    fn try_client(&self, timeout: Duration) -> Result<postgres::Client, postgres::Error> {
        let mut config: postgres::Config = self.url().parse()?;
        config.connect_timeout(timeout);
        config.connect(postgres::NoTls)
    }

    /// A plain client for looking at (or tampering with) what syncguard stored.
    pub fn client(&self) -> postgres::Client {
        self.try_client(PATIENT)
            .expect("connect to the test PostgreSQL")
    }

    pub fn stop(&mut self) {
        self.instance.stop();
    }

    /// Stops and starts the same cluster again (its data survives).
    pub fn restart(&mut self) {
        self.stop();
        self.launch();
    }
}

/// Drops the server functions of `lock_table` (as on tables the TypeScript SyncGuard set up),
/// checking that all twenty-two (locks, sets of locks, semaphores, the line and shared holds) were there.
pub fn drop_server_functions(client: &mut postgres::Client, lock_table: &str) {
    let functions: Vec<String> = client
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.proname LIKE $1",
            &[&format!("{lock_table}\\_%\\_v8")],
        )
        .expect("list the server functions")
        .iter()
        .map(|row| row.get(0))
        .collect();
    assert_eq!(functions.len(), 22, "{functions:?}");
    client
        .batch_execute(&format!("DROP FUNCTION {}", functions.join(", ")))
        .expect("drop the server functions");
}

/// Creates `locks` and `fences` as the TypeScript SyncGuard's own DDL does (seed 004, its
/// `setupSchema`): the tables and indexes, no `holder` column, no server functions, no
/// semaphore tables.
pub fn create_typescript_tables(client: &mut postgres::Client, locks: &str, fences: &str) {
    client
        .batch_execute(&format!(
            "CREATE TABLE IF NOT EXISTS {locks} (key TEXT PRIMARY KEY, lock_id TEXT NOT NULL, \
             expires_at_ms BIGINT NOT NULL, acquired_at_ms BIGINT NOT NULL, fence TEXT NOT NULL, \
             user_key TEXT NOT NULL);
             CREATE UNIQUE INDEX IF NOT EXISTS idx_{locks}_lock_id ON {locks}(lock_id);
             CREATE INDEX IF NOT EXISTS idx_{locks}_expires ON {locks}(expires_at_ms);
             CREATE TABLE IF NOT EXISTS {fences} (fence_key TEXT PRIMARY KEY, \
             fence BIGINT NOT NULL DEFAULT 0, key_debug TEXT);"
        ))
        .expect("create the tables as the TypeScript SyncGuard does");
}

/// Removes the tables of one test (`tables` and the semaphore tables named after them) and
/// every function named after its lock table, from [`shared_postgres`].
pub fn drop_tables(tables: &TableNames) {
    let mut client = shared_postgres().client();
    let locks = tables.lock_table();
    let functions: Vec<String> = client
        .query(
            "SELECT p.oid::regprocedure::text FROM pg_proc p WHERE p.proname LIKE $1",
            &[&format!("{locks}\\_%")],
        )
        .expect("list the functions")
        .iter()
        .map(|row| row.get(0))
        .collect();
    let mut ddl = format!(
        "DROP TABLE IF EXISTS {locks}, {}, {}, {}, {}, {};",
        tables.fence_table(),
        tables.semaphore_table(),
        tables.permit_table(),
        tables.line_table(),
        tables.shared_table()
    );
    if !functions.is_empty() {
        ddl.push_str(&format!("DROP FUNCTION {};", functions.join(", ")));
    }
    client.batch_execute(&ddl).expect("drop the tables");
}

/// One cluster shared by every test, of every area, that needs no cluster of its own.
pub fn shared_postgres() -> &'static PgServer {
    static SERVER: OnceLock<PgServer> = OnceLock::new();
    SERVER.get_or_init(PgServer::start)
}

/// [`shared_postgres`], once the default tables exist on it.
pub fn shared_postgres_with_tables() -> &'static PgServer {
    static TABLES: OnceLock<()> = OnceLock::new();
    let server = shared_postgres();
    TABLES.get_or_init(|| {
        setup_schema(&mut server.client(), &TableNames::default())
            .expect("create the default tables on the shared cluster");
    });
    server
}

/// A backend on [`shared_postgres`], whose default tables exist; its timeouts are [`PATIENT`]
/// hang guards.
pub fn shared_postgres_backend() -> PostgresBackend {
    patient_postgres(&shared_postgres_with_tables().url())
        .build()
        .expect("connect to the test PostgreSQL")
}

/// A builder for a backend on `url` whose timeouts are [`PATIENT`] hang guards.
pub fn patient_postgres(url: &str) -> PostgresBuilder {
    PostgresBackend::builder()
        .url(url)
        .connect_timeout(PATIENT)
        .statement_timeout(PATIENT)
        .pool_timeout(PATIENT)
}

/// A backend on [`shared_postgres`] (its default tables exist), and a plain client for looking
/// at (or tampering with) what it stored.
pub fn shared_postgres_with_client() -> (PostgresBackend, postgres::Client) {
    (shared_postgres_backend(), shared_postgres().client())
}

/// [`shared_postgres`]'s clock, read over a connection of its own.
pub fn shared_postgres_now_ms() -> i64 {
    postgres_now_ms(&mut shared_postgres().client())
}

/// PostgreSQL's clock (`clock_timestamp()`), in Unix ms.
pub fn postgres_now_ms(client: &mut postgres::Client) -> i64 {
    client
        .query_one(
            "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint",
            &[],
        )
        .unwrap()
        .get(0)
}

/// A builder for a backend on `url` for fault tests: [`BRISK`] to connect, per statement, and
/// to wait for a pooled connection.
pub fn impatient_postgres(url: &str) -> PostgresBuilder {
    PostgresBackend::builder()
        .url(url)
        .connect_timeout(BRISK)
        .statement_timeout(BRISK)
        .pool_timeout(BRISK)
}

/// A backend on `url` with fresh tables of its own (their names made unique), set up with their
/// server functions; and the lock table's name.
pub fn backend_on_fresh_tables(url: &str) -> (PostgresBackend, String) {
    let suffix = generate_lock_id().to_lowercase().replace('-', "_");
    let locks = format!("t_locks_{suffix}");
    let backend = PostgresBackend::builder()
        .url(url)
        .table_name(&locks)
        .fence_table_name(format!("t_fences_{suffix}"))
        .build()
        .unwrap();
    backend.setup_schema().unwrap();
    (backend, locks)
}
