//! A Redis Cluster for the tests: 3 primaries and 3 replicas, created with
//! `redis-cli --cluster create … --cluster-replicas 1`, ready once every node reports
//! `cluster_state:ok`, knows all six nodes, and every replica's link to its primary is up. Or,
//! for TLS, 3 primaries that also serve TLS (their bus too), announcing themselves as
//! `localhost`, the name their certificate lists.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::redis_topology::{Node, connection, data_node_args, fields, info};
use super::require_program;

/// How long a node may be unreachable before the Cluster fails it over.
const NODE_TIMEOUT_MS: u32 = 1000;

/// A running Cluster; dropping it stops every node.
pub struct RedisCluster {
    pub nodes: Vec<Node>,
    /// Each node's TLS port, for a TLS Cluster (empty otherwise).
    tls_ports: Vec<u16>,
    replicas: bool,
}

/// A node's line of `CLUSTER NODES`.
#[derive(Debug, Clone)]
pub struct ClusterNodeInfo {
    pub port: u16,
    pub primary: bool,
    pub failed: bool,
    pub slots: Vec<(u16, u16)>,
}

/// The certificate, key and CA of a TLS Cluster's nodes.
pub struct ClusterTls<'a> {
    pub cert: &'a Path,
    pub key: &'a Path,
    pub ca: &'a Path,
}

impl RedisCluster {
    /// Starts six nodes and makes them one Cluster.
    pub fn start() -> RedisCluster {
        RedisCluster::create(6, None)
    }

    /// Starts three primaries (no replicas) that also serve TLS, cluster bus included, and
    /// announce themselves as `localhost`; [`tls_url`](Self::tls_url) names their TLS ports.
    pub fn start_tls(tls: ClusterTls<'_>) -> RedisCluster {
        RedisCluster::create(3, Some(tls))
    }

    fn create(size: usize, tls: Option<ClusterTls<'_>>) -> RedisCluster {
        let tls_ports: Vec<u16> = match tls {
            Some(_) => (0..size).map(|_| super::free_port()).collect(),
            None => Vec::new(),
        };
        let tls_files: Option<[PathBuf; 3]> =
            tls.map(|t| [t.cert.to_owned(), t.key.to_owned(), t.ca.to_owned()]);
        let mut nodes: Vec<Node> = (0..size)
            .map(|n| {
                // The bus port stays with the node's port: a restarted node keeps both.
                let bus = std::sync::Mutex::new((0, 0));
                let tls = tls_files.clone().map(|files| (tls_ports[n], files));
                Node::new("redis-cluster", move |port, dir| {
                    let mut args = data_node_args(port, dir);
                    let mut bus = bus.lock().unwrap();
                    if bus.0 != port {
                        *bus = (port, super::free_port());
                    }
                    let bus_port = bus.1.to_string();
                    let node_timeout = NODE_TIMEOUT_MS.to_string();
                    for (option, value) in [
                        ("--cluster-enabled", "yes"),
                        ("--cluster-config-file", "nodes.conf"),
                        ("--cluster-port", bus_port.as_str()),
                        ("--cluster-node-timeout", node_timeout.as_str()),
                        // A replica whose primary just died is always eligible to replace it.
                        ("--cluster-replica-validity-factor", "0"),
                    ] {
                        args.extend([option.to_owned(), value.to_owned()]);
                    }
                    if let Some((tls_port, [cert, key, ca])) = &tls {
                        for (option, value) in [
                            ("--tls-port", tls_port.to_string()),
                            ("--tls-cert-file", cert.display().to_string()),
                            ("--tls-key-file", key.display().to_string()),
                            ("--tls-ca-cert-file", ca.display().to_string()),
                            ("--tls-auth-clients", "no".to_owned()),
                            ("--tls-cluster", "yes".to_owned()),
                            ("--tls-replication", "yes".to_owned()),
                            ("--cluster-announce-hostname", "localhost".to_owned()),
                            ("--cluster-preferred-endpoint-type", "hostname".to_owned()),
                        ] {
                            args.extend([option.to_owned(), value]);
                        }
                    }
                    args
                })
            })
            .collect();
        for node in &mut nodes {
            node.start();
        }
        let replicas = tls_ports.is_empty();
        let cli = require_program("redis-cli", "redis-tools");
        let output = Command::new(cli)
            .arg("--cluster")
            .arg("create")
            .args(nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)))
            .args(if replicas {
                &["--cluster-replicas", "1", "--cluster-yes"][..]
            } else {
                &["--cluster-yes"][..]
            })
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            output.status.success(),
            "redis-cli --cluster create failed:\n{}\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        let cluster = RedisCluster {
            nodes,
            tls_ports,
            replicas,
        };
        cluster.await_healthy(&cluster.ports());
        cluster
    }

    /// `rediss-cluster://` URL naming every node's TLS port by the name its certificate lists.
    pub fn tls_url(&self) -> String {
        let hosts: Vec<String> = self
            .tls_ports
            .iter()
            .map(|port| format!("localhost:{port}"))
            .collect();
        format!("rediss-cluster://{}/", hosts.join(","))
    }

    fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|n| n.port).collect()
    }

    /// `redis-cluster://` URL naming every node.
    pub fn url(&self) -> String {
        let hosts: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        format!("redis-cluster://{}/", hosts.join(","))
    }

    /// Waits until the nodes on `ports` agree the Cluster is whole: state ok, all slots served,
    /// all six nodes known, three primaries each with a replica whose link is up.
    pub fn await_healthy(&self, ports: &[u16]) {
        self.await_condition("the Cluster to be healthy", || {
            ports.iter().all(|&port| {
                let info = cluster_info(port);
                info.get("cluster_state").map(String::as_str) == Some("ok")
                    && info.get("cluster_slots_ok").map(String::as_str) == Some("16384")
                    && info.get("cluster_known_nodes").map(String::as_str)
                        == Some(self.nodes.len().to_string().as_str())
            }) && (!self.replicas || self.replicas_linked(ports))
        });
    }

    fn replicas_linked(&self, ports: &[u16]) -> bool {
        let Some(nodes) = ports.iter().find_map(|&port| cluster_nodes(port)) else {
            return false;
        };
        let primaries = nodes.iter().filter(|n| n.primary && !n.failed).count();
        let replicas: Vec<&ClusterNodeInfo> = nodes
            .iter()
            .filter(|n| !n.primary && !n.failed && ports.contains(&n.port))
            .collect();
        primaries == 3
            && replicas.len() == 3
            && replicas.iter().all(|replica| {
                info(replica.port, "replication")
                    .get("master_link_status")
                    .map(String::as_str)
                    == Some("up")
            })
    }

    /// Waits for `condition`, or fails the test with the nodes' logs.
    pub fn await_condition(&self, what: &str, mut condition: impl FnMut() -> bool) {
        // Generous: a loaded machine starts many servers at once.
        let deadline = Instant::now() + Duration::from_secs(120);
        while !condition() {
            if Instant::now() > deadline {
                let logs: Vec<String> = self
                    .nodes
                    .iter()
                    .map(|n| {
                        format!(
                            "--- node {}: {:?}\n{}",
                            n.port,
                            cluster_nodes(n.port),
                            n.log_tail()
                        )
                    })
                    .collect();
                panic!("timed out waiting for {what}; logs:\n{}", logs.join("\n"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The primary currently serving `slot`, as the node on `asked` sees it.
    pub fn primary_of(&self, slot: u16, asked: u16) -> Option<u16> {
        cluster_nodes(asked)?
            .into_iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .map(|n| n.port)
    }

    /// The node on `port`.
    pub fn node_mut(&mut self, port: u16) -> &mut Node {
        self.nodes
            .iter_mut()
            .find(|n| n.port == port)
            .expect("a node of this Cluster")
    }

    /// A plain redis-rs cluster connection, for tests that read or write keys behind the
    /// backend's back.
    pub fn raw(&self) -> redis::cluster::ClusterConnection {
        let nodes: Vec<String> = self
            .nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}/", n.port))
            .collect();
        redis::cluster::ClusterClient::builder(nodes)
            .connection_timeout(Duration::from_secs(10))
            .response_timeout(Duration::from_secs(10))
            .build()
            .and_then(|client| client.get_connection())
            .expect("a raw connection to the test Cluster")
    }

    /// The hash slot of `key`, as the Cluster computes it.
    pub fn key_slot(&self, key: &str) -> u16 {
        let mut conn = self.nodes[0].connection();
        redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(key)
            .query(&mut conn)
            .expect("CLUSTER KEYSLOT")
    }
}

/// `CLUSTER INFO` of the node on `port`.
pub fn cluster_info(port: u16) -> std::collections::HashMap<String, String> {
    connection(port)
        .and_then(|mut c| redis::cmd("CLUSTER").arg("INFO").query::<String>(&mut c))
        .map(|text| fields(&text))
        .unwrap_or_default()
}

/// `CLUSTER NODES` of the node on `port`, parsed.
pub fn cluster_nodes(port: u16) -> Option<Vec<ClusterNodeInfo>> {
    let text: String = connection(port)
        .and_then(|mut c| redis::cmd("CLUSTER").arg("NODES").query(&mut c))
        .ok()?;
    text.lines()
        .map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // <id> <ip:port@cport> <flags> <primary> <ping> <pong> <epoch> <link> <slot>...
            let port = fields
                .get(1)?
                .split('@')
                .next()?
                .rsplit(':')
                .next()?
                .parse()
                .ok()?;
            let flags = fields.get(2)?;
            let slots = fields
                .iter()
                .skip(8)
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|one| (one, one)),
                })
                .collect();
            Some(ClusterNodeInfo {
                port,
                primary: flags.contains("master"),
                failed: flags.contains("fail") && !flags.contains("fail?"),
                slots,
            })
        })
        .collect()
}

/// One Cluster shared by every test that does not stop nodes; it lives until the test process
/// exits.
pub fn shared_cluster() -> &'static RedisCluster {
    static CLUSTER: OnceLock<RedisCluster> = OnceLock::new();
    CLUSTER.get_or_init(RedisCluster::start)
}
