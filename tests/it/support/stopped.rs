//! A process stopped (SIGSTOP) until dropped (SIGCONT), also when the test fails: a server that
//! keeps its connections, buffers what it is sent and answers nothing, or a replica that stays
//! connected and acknowledges nothing.

use std::process::Command;

use super::redis_topology::info;

/// A stopped process, continued when dropped.
pub struct Stopped(u32);

impl Stopped {
    /// Stops the process `pid`.
    pub fn pid(pid: u32) -> Stopped {
        assert!(signal(pid, "STOP"), "kill -STOP {pid}");
        Stopped(pid)
    }

    /// Stops the Redis server (or Sentinel) on `127.0.0.1:port`.
    pub fn redis(port: u16) -> Stopped {
        let pid = info(port, "server")
            .get("process_id")
            .and_then(|pid| pid.parse().ok())
            .expect("INFO names the server's process id");
        Stopped::pid(pid)
    }

    /// Stops the (first) replica of the Redis primary on `127.0.0.1:port`.
    pub fn replica_of(port: u16) -> Stopped {
        let replica = info(port, "replication")
            .get("slave0")
            .and_then(|s| s.split(',').find_map(|f| f.strip_prefix("port=")))
            .and_then(|p| p.parse::<u16>().ok())
            .expect("the primary has a replica");
        Stopped::redis(replica)
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // No panic while unwinding from another: a process left stopped is killed by its
        // harness all the same.
        if !signal(self.0, "CONT") && !std::thread::panicking() {
            panic!("kill -CONT {}", self.0);
        }
    }
}

fn signal(pid: u32, name: &str) -> bool {
    Command::new("kill")
        .arg(format!("-{name}"))
        .arg(pid.to_string())
        .status()
        .is_ok_and(|status| status.success())
}
