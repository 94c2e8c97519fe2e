//! What the Cluster and Sentinel harnesses share: a `redis-server` process that can be killed
//! and started again on the same port with the same files, and small queries.

use std::path::Path;
use std::time::Duration;

use super::{Instance, Service, free_port, require_program};

/// The arguments of a node for its port and directory.
type Args = Box<dyn Fn(u16, &Path) -> Vec<String> + Send + Sync>;

/// One `redis-server` (data node or Sentinel) of a test deployment. Stopping it sends
/// SIGKILL: a crash, with whatever was not yet replicated lost.
pub struct Node {
    pub port: u16,
    name: String,
    args: Args,
    started: bool,
    instance: Instance,
}

impl Node {
    /// A node on a free port; `args(port, dir)` are its command-line arguments.
    pub fn new(
        name: &str,
        args: impl Fn(u16, &Path) -> Vec<String> + Send + Sync + 'static,
    ) -> Node {
        Node {
            port: free_port(),
            name: name.to_owned(),
            args: Box::new(args),
            started: false,
            instance: Instance::new(name),
        }
    }

    pub fn dir(&self) -> &Path {
        self.instance.dir()
    }

    /// Starts the process (again, on the same port and files) and waits until it answers
    /// `PING`. A first start that finds its port taken (free ports are only free when asked)
    /// moves to another.
    pub fn start(&mut self) {
        let program = require_program("redis-server", "redis-server");
        for _ in 0..3 {
            let log = self.dir().join("redis.log");
            let _ = std::fs::remove_file(&log);
            let service = Service::spawn_with_stop_signal(
                &format!("{} on port {}", self.name, self.port),
                &program,
                &(self.args)(self.port, self.dir()),
                &log,
                "KILL",
            );
            let port = self.port;
            let mut port_taken = false;
            service.await_ready(Duration::from_secs(30), || {
                port_taken = std::fs::read_to_string(&log)
                    .is_ok_and(|text| text.contains("Address already in use"));
                port_taken || ping(port)
            });
            self.instance.running(service);
            if !port_taken {
                self.started = true;
                return;
            }
            assert!(
                !self.started,
                "{}: its port was taken on restart",
                self.name
            );
            self.instance.stop();
            self.port = free_port();
        }
        panic!("{}: no free port found", self.name);
    }

    /// Kills the process (SIGKILL) and waits for it to be gone; its files stay.
    pub fn kill(&mut self) {
        self.instance.stop();
    }

    /// A plain connection.
    pub fn connection(&self) -> redis::Connection {
        connection(self.port).expect("connect to a test Redis node")
    }

    /// The last lines of its log, for failure messages.
    pub fn log_tail(&self) -> String {
        self.instance.log_tail()
    }

    /// A data node (not started yet) that replicates the server at `127.0.0.1:primary_port`:
    /// the primary itself, or a proxy in front of it.
    pub fn replica_of(primary_port: u16) -> Node {
        Node::new("redis-replica", move |port, dir| {
            let mut args = data_node_args(port, dir);
            args.extend([
                "--replicaof".to_owned(),
                "127.0.0.1".to_owned(),
                primary_port.to_string(),
            ]);
            args
        })
    }

    /// Waits until this replica's link to its primary is up.
    pub fn await_replica_link(&self) {
        syncguard::testing::support::wait_until(
            "the replica's link",
            Duration::from_secs(30),
            || {
                info(self.port, "replication")
                    .get("master_link_status")
                    .map(String::as_str)
                    == Some("up")
            },
        );
    }
}

/// A connection to `127.0.0.1:port`. Its deadlines are hang guards, generous for a loaded
/// machine: a stopped node refuses at once, and callers that wait for a state poll.
pub fn connection(port: u16) -> redis::RedisResult<redis::Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?;
    let connection = client.get_connection_with_timeout(Duration::from_secs(5))?;
    connection.set_read_timeout(Some(Duration::from_secs(10)))?;
    connection.set_write_timeout(Some(Duration::from_secs(10)))?;
    Ok(connection)
}

fn ping(port: u16) -> bool {
    connection(port)
        .and_then(|mut conn| redis::cmd("PING").query::<String>(&mut conn))
        .is_ok()
}

/// `INFO section` of the node on `port` as `field → value`; empty when it does not answer.
pub fn info(port: u16, section: &str) -> std::collections::HashMap<String, String> {
    connection(port)
        .and_then(|mut conn| redis::cmd("INFO").arg(section).query::<String>(&mut conn))
        .map(|text| fields(&text))
        .unwrap_or_default()
}

/// The `field:value` lines of an `INFO` or `CLUSTER INFO` answer.
pub fn fields(text: &str) -> std::collections::HashMap<String, String> {
    text.lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect()
}

/// The arguments every data node shares: loopback, no persistence, its own directory.
pub fn data_node_args(port: u16, dir: &Path) -> Vec<String> {
    [
        "--port",
        &port.to_string(),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--daemonize",
        "no",
        "--dir",
        &dir.to_string_lossy(),
        // Replicas sync at once instead of waiting for others to join the same transfer.
        "--repl-diskless-sync-delay",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}
