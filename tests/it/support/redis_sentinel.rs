//! A primary, one replica and three Sentinels (`redis-server sentinel.conf --sentinel`,
//! quorum 2, `down-after-milliseconds` 1000), ready once every Sentinel names the primary,
//! knows the replica and the two other Sentinels, and the replica's link is up.

use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::redis_topology::{Node, connection, data_node_args, info};

/// The name the Sentinels know the primary by.
pub const MASTER_NAME: &str = "syncguard-test";

/// A running Sentinel deployment; dropping it stops every process.
pub struct RedisSentinels {
    /// The two data nodes: `data[0]` starts as the primary.
    pub data: Vec<Node>,
    pub sentinels: Vec<Node>,
}

impl RedisSentinels {
    pub fn start() -> RedisSentinels {
        let mut primary = Node::new("redis-primary", data_node_args);
        primary.start();
        let primary_port = primary.port;
        let mut replica = Node::replica_of(primary_port);
        replica.start();
        let sentinels = (0..3)
            .map(|_| {
                let mut sentinel = Node::new("redis-sentinel", move |port, dir| {
                    // Sentinel rewrites its configuration file: it lives in the scratch dir.
                    let config = dir.join("sentinel.conf");
                    let text = format!(
                        "port {port}\nbind 127.0.0.1\ndir {dir}\n\
                         sentinel monitor {MASTER_NAME} 127.0.0.1 {primary_port} 2\n\
                         sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                         sentinel failover-timeout {MASTER_NAME} 10000\n\
                         sentinel parallel-syncs {MASTER_NAME} 1\n",
                        dir = dir.display()
                    );
                    std::fs::write(&config, text).expect("write sentinel.conf");
                    vec![
                        config.to_string_lossy().into_owned(),
                        "--sentinel".to_owned(),
                    ]
                });
                sentinel.start();
                sentinel
            })
            .collect();
        let deployment = RedisSentinels {
            data: vec![primary, replica],
            sentinels,
        };
        deployment.await_healthy();
        deployment
    }

    /// `redis-sentinel://` URL naming the three Sentinels and the primary's name.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .sentinels
            .iter()
            .map(|s| format!("127.0.0.1:{}", s.port))
            .collect();
        format!("redis-sentinel://{}/{MASTER_NAME}", hosts.join(","))
    }

    /// The port every Sentinel names as the primary, once they agree.
    pub fn agreed_primary(&self) -> Option<u16> {
        let answers: Vec<Option<u16>> = self
            .sentinels
            .iter()
            .map(|s| sentinel_primary(s.port))
            .collect();
        let first = answers.first().copied().flatten()?;
        answers.iter().all(|a| *a == Some(first)).then_some(first)
    }

    /// Waits until the Sentinels agree on a primary that has a replica with its link up, and
    /// each Sentinel knows the two others and that replica.
    pub fn await_healthy(&self) {
        self.await_condition("the Sentinel deployment to be healthy", || {
            let Some(primary) = self.agreed_primary() else {
                return false;
            };
            let replica_up = self.data.iter().any(|node| {
                let replication = info(node.port, "replication");
                replication.get("role").map(String::as_str) == Some("slave")
                    && replication.get("master_port") == Some(&primary.to_string())
                    && replication.get("master_link_status").map(String::as_str) == Some("up")
            });
            replica_up
                && self.sentinels.iter().all(|s| {
                    let state = sentinel_master_state(s.port);
                    state.get("num-other-sentinels").map(String::as_str) == Some("2")
                        && state.get("num-slaves").map(String::as_str) == Some("1")
                        && !state.get("flags").is_some_and(|f| f.contains("down"))
                })
        });
    }

    /// Waits for `condition`, or fails the test with the processes' logs.
    pub fn await_condition(&self, what: &str, mut condition: impl FnMut() -> bool) {
        // Generous: a loaded machine starts many servers at once.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !condition() {
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .data
                    .iter()
                    .chain(&self.sentinels)
                    .map(|n| format!("--- port {}:\n{}", n.port, n.log_tail()))
                    .collect();
                panic!("timed out waiting for {what}; logs:\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The data node on `port`.
    pub fn data_node_mut(&mut self, port: u16) -> &mut Node {
        self.data
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a data node of this deployment")
    }
}

/// What the Sentinel on `port` names as the primary.
pub fn sentinel_primary(port: u16) -> Option<u16> {
    let answer: Option<(String, String)> = connection(port)
        .and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg("get-master-addr-by-name")
                .arg(MASTER_NAME)
                .query(&mut c)
        })
        .ok()?;
    answer?.1.parse().ok()
}

/// `SENTINEL MASTER NAME` on the Sentinel on `port`, as `field → value`.
fn sentinel_master_state(port: u16) -> std::collections::HashMap<String, String> {
    connection(port)
        .and_then(|mut c| {
            redis::cmd("SENTINEL")
                .arg("MASTER")
                .arg(MASTER_NAME)
                .query::<std::collections::HashMap<String, String>>(&mut c)
        })
        .unwrap_or_default()
}

/// One deployment shared by every test that does not stop a server; it lives until the test
/// process exits.
pub fn shared_sentinels() -> &'static RedisSentinels {
    static SENTINELS: OnceLock<RedisSentinels> = OnceLock::new();
    SENTINELS.get_or_init(RedisSentinels::start)
}
