//! The stores the command's end-to-end tests run on: a URL and the environment the command needs
//! for it, on Redis, a Redis Cluster, PostgreSQL, PgBouncer and the Firestore emulator
//! ([`on_every_store!`](crate::on_every_store)).

use std::process::{Command, Stdio};

use serde_json::Value as Json;

use crate::cli::syncguard;
use crate::support;

/// A store for the command: its URL and the environment it needs.
pub(crate) struct Store {
    pub(crate) url: String,
    env: Vec<(&'static str, String)>,
}

impl Store {
    pub(crate) fn command(&self, args: &[&str]) -> Command {
        let mut command = syncguard(&[&["--url", &self.url], args].concat());
        for (name, value) in &self.env {
            command.env(name, value);
        }
        command
    }

    /// Runs the command to its end: its exit code and stdout.
    pub(crate) fn output(&self, args: &[&str]) -> (i32, String) {
        let output = self
            .command(args)
            .stderr(Stdio::inherit())
            .output()
            .expect("run syncguard");
        (
            output.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&output.stdout).into_owned(),
        )
    }

    /// The pids in the holder texts of the key's `"waiters"`, in line order.
    pub(crate) fn waiting_pids(&self, key: &str) -> Vec<u32> {
        self.status(key)["waiters"]
            .as_array()
            .map(|waiters| {
                waiters
                    .iter()
                    .filter_map(|waiter| waiter["holder"].as_str().and_then(holder_pid))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl Store {
    pub(crate) fn redis() -> Store {
        Store::at(support::shared_redis().url())
    }

    pub(crate) fn redis_cluster() -> Store {
        Store::at(support::shared_cluster().url())
    }

    pub(crate) fn postgres() -> Store {
        Store::at(support::shared_postgres_with_tables().url())
    }

    pub(crate) fn pgbouncer() -> Store {
        // PgBouncer fronts the shared cluster: its tables must exist there.
        support::shared_postgres_with_tables();
        Store::at(support::shared_pgbouncer().url())
    }

    pub(crate) fn firestore() -> Store {
        Store {
            url: format!("firestore://{}", support::FIRESTORE_PROJECT),
            env: vec![(
                "FIRESTORE_EMULATOR_HOST",
                support::shared_firestore().host(),
            )],
        }
    }

    fn at(url: String) -> Store {
        Store {
            url,
            env: Vec::new(),
        }
    }

    /// The status JSON of `key` (`null` when nothing is held and nobody waits).
    pub(crate) fn status(&self, key: &str) -> Json {
        let (_, out) = self.output(&["status", "--key", key]);
        serde_json::from_str(out.trim()).unwrap_or(Json::Null)
    }
}

/// `HOST:PID PROGRAM` → PID.
pub(crate) fn holder_pid(holder: &str) -> Option<u32> {
    let (_, rest) = holder.rsplit_once(':')?;
    rest.split(' ').next()?.parse().ok()
}
