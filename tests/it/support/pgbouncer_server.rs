//! PgBouncer in transaction mode, in front of a test PostgreSQL cluster.
//!
//! The pooler runs with `pool_mode = transaction` and otherwise PgBouncer's defaults: it
//! rejects startup parameters it does not know (`options` among them) and keeps no track of
//! prepared statements, so a client that relies on either breaks here as it would behind a
//! production pooler. A small server pool makes many clients share few server connections.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use super::postgres_server::{as_postgres_user, give_to_postgres_user};
use super::{Instance, PG_PASSWORD, PG_USER, PgServer, Service, free_port, shared_postgres};

/// The Debian package that ships the binary.
const PACKAGE: &str = "pgbouncer";

/// Server connections per (database, user) pair: few, so that clients share them.
pub const PGBOUNCER_POOL_SIZE: u32 = 4;

/// The `pgbouncer` binary: on PATH, or where Debian installs it (`/usr/sbin`, which is not on
/// every PATH). Missing, it fails the test with the package to install.
fn pgbouncer_binary() -> PathBuf {
    let debian = PathBuf::from("/usr/sbin/pgbouncer");
    if debian.is_file() {
        return debian;
    }
    super::require_program("pgbouncer", PACKAGE)
}

/// A PgBouncer of its own, on a free port, pooling connections to one [`PgServer`].
pub struct PgBouncer {
    pub port: u16,
    instance: Instance,
}

impl PgBouncer {
    pub fn start(server: &PgServer) -> PgBouncer {
        let instance = Instance::new("pgbouncer");
        let dir = instance.dir();
        let port = free_port();
        let config = dir.join("pgbouncer.ini");
        let auth_file = dir.join("userlist.txt");
        // A plain-text password lets PgBouncer answer the server's SCRAM challenge and check
        // its own clients with SCRAM.
        std::fs::write(&auth_file, format!("\"{PG_USER}\" \"{PG_PASSWORD}\"\n"))
            .expect("write PgBouncer's auth file");
        std::fs::write(
            &config,
            format!(
                "[databases]\n\
                 postgres = host=127.0.0.1 port={server_port} dbname=postgres\n\
                 \n\
                 [pgbouncer]\n\
                 listen_addr = 127.0.0.1\n\
                 listen_port = {port}\n\
                 unix_socket_dir =\n\
                 pidfile = {pidfile}\n\
                 auth_type = scram-sha-256\n\
                 auth_file = {auth_file}\n\
                 pool_mode = transaction\n\
                 default_pool_size = {PGBOUNCER_POOL_SIZE}\n\
                 ; Capacity only (the default is 100): every test shares this\n\
                 ; pooler, each backend with a client pool of its own.\n\
                 max_client_conn = 500\n",
                server_port = server.port,
                pidfile = dir.join("pgbouncer.pid").display(),
                auth_file = auth_file.display(),
            ),
        )
        .expect("write PgBouncer's configuration");

        // PgBouncer refuses to run as root: then it runs as `postgres`, as the clusters do.
        give_to_postgres_user(dir);
        let (program, mut args) = as_postgres_user(&pgbouncer_binary());
        // In the foreground (no `-d`): the watchdog owns the process; it logs to stderr.
        args.push(config.to_string_lossy().into_owned());
        // SIGTERM is PgBouncer's immediate shutdown.
        let service = Service::spawn(
            &format!("pgbouncer on port {port}"),
            &program,
            &args,
            &dir.join("pgbouncer.log"),
        );
        let mut bouncer = PgBouncer { port, instance };
        service.await_ready(Duration::from_secs(30), || bouncer.try_query().is_ok());
        bouncer.instance.running(service);
        bouncer
    }

    /// `postgres://syncguard:…@127.0.0.1:<port>/postgres`, through the pooler.
    pub fn url(&self) -> String {
        format!(
            "postgres://{PG_USER}:{PG_PASSWORD}@127.0.0.1:{}/postgres",
            self.port
        )
    }

    /// One real round trip through the pooler to the server (a simple query: no prepared
    /// statement, so it works behind any pooler).
    fn try_query(&self) -> Result<(), postgres::Error> {
        let mut config: postgres::Config = self.url().parse()?;
        config.connect_timeout(Duration::from_millis(500));
        let mut client = config.connect(postgres::NoTls)?;
        client.simple_query("SELECT 1").map(|_| ())
    }

    /// The last lines PgBouncer logged, for failure messages.
    pub fn log_tail(&self) -> String {
        self.instance.log_tail()
    }

    pub fn stop(&mut self) {
        self.instance.stop();
    }
}

/// One PgBouncer, in front of [`shared_postgres`], shared by every test.
pub fn shared_pgbouncer() -> &'static PgBouncer {
    static BOUNCER: OnceLock<PgBouncer> = OnceLock::new();
    BOUNCER.get_or_init(|| PgBouncer::start(shared_postgres()))
}
