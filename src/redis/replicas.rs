//! `min_replicas`: after an acquisition, `WAIT` until enough replicas acknowledge it, so that a
//! failover cannot lose the fence counter's increment (see [Failover](super#failover)).

use std::time::Duration;

use redis::RedisResult;
use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, SlotAddr};

use super::cluster::spoils_the_connection;
use super::pool::Conn;
use crate::error::{LockError, Result};

/// How many replicas must acknowledge an acquisition, and how long to wait for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReplicaAcks {
    pub replicas: u32,
    pub timeout: Duration,
}

impl ReplicaAcks {
    /// The policy from the options, checked: `None` without `min_replicas`. The timeout
    /// defaults to half of `read_timeout` and must stay below it: `WAIT` holds the reply back
    /// for up to that long.
    pub fn from_options(
        replicas: Option<u32>,
        timeout: Option<Duration>,
        read_timeout: Duration,
    ) -> Result<Option<ReplicaAcks>> {
        let Some(replicas) = replicas else {
            if timeout.is_some() {
                return Err(LockError::invalid_argument(
                    "replica_timeout applies only with min_replicas",
                ));
            }
            return Ok(None);
        };
        if replicas == 0 {
            return Err(LockError::invalid_argument(
                "min_replicas must be at least 1 (leave it out not to wait for replicas)",
            ));
        }
        let timeout = timeout.unwrap_or(read_timeout / 2);
        // WAIT takes whole milliseconds, and 0 would mean forever.
        if timeout.as_millis() == 0 || !timeout.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(LockError::invalid_argument(
                "replica_timeout must be a whole number of milliseconds, at least 1 ms",
            ));
        }
        if timeout >= read_timeout {
            return Err(LockError::invalid_argument(format!(
                "replica_timeout ({timeout:?}) must be shorter than read_timeout \
                 ({read_timeout:?}): the WAIT for replicas runs under the read timeout"
            )));
        }
        Ok(Some(ReplicaAcks { replicas, timeout }))
    }

    /// `WAIT replicas timeout` on the connection that made the writes: on a Cluster, on the
    /// primary of each of `slots` in turn (the slots written: a lock's record and its index
    /// entry lie in two), through the node connections that wrote. The fewest acknowledgements
    /// any of them got.
    ///
    /// `WAIT` waits for the replication offset its own connection last recorded. A fresh
    /// connection that never wrote has none recorded on servers that record it only after
    /// commands that replicate (the current Redis source; 7.0 records it after any command):
    /// there, `WAIT` returns at once counting every connected replica, including one that
    /// lacks the acquisition. So on a Cluster the client must not resend it on a new node
    /// connection, as it does after a dropped one when reconnecting is on: for the `WAIT` it is
    /// off, and a dropped connection fails the `WAIT` (the acquisition is then undone).
    pub fn wait(&self, conn: Conn<'_>, slots: &[u16]) -> RedisResult<i64> {
        let mut wait = redis::cmd("WAIT");
        wait.arg(self.replicas).arg(self.timeout.as_millis() as u64);
        match conn {
            Conn::Single(conn) | Conn::Lent(conn) => wait.query(conn),
            Conn::Cluster(own) => {
                own.connection.set_auto_reconnect(false);
                let mut fewest = Ok(i64::MAX);
                for (at, &slot) in slots.iter().enumerate() {
                    if slots[..at].contains(&slot) {
                        continue;
                    }
                    let route = RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(
                        Route::new(slot, SlotAddr::Master),
                    ));
                    let value = own.connection.route_command(&wait, route);
                    // Its failure is the acquisition's answer, not the call's: see `Conn`.
                    if value.as_ref().is_err_and(spoils_the_connection) {
                        own.poisoned = true;
                    }
                    match value
                        .and_then(|value| redis::from_redis_value::<i64>(value).map_err(Into::into))
                    {
                        Ok(acknowledged) => fewest = fewest.map(|n| n.min(acknowledged)),
                        Err(error) => {
                            fewest = Err(error);
                            break;
                        }
                    }
                }
                // The default, which syncguard never changes elsewhere.
                own.connection.set_auto_reconnect(true);
                fewest
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_are_checked() {
        let read = Duration::from_secs(2);
        let ms = Duration::from_millis;
        assert_eq!(ReplicaAcks::from_options(None, None, read).unwrap(), None);
        assert_eq!(
            ReplicaAcks::from_options(Some(1), None, read).unwrap(),
            Some(ReplicaAcks {
                replicas: 1,
                timeout: ms(1000)
            })
        );
        for (replicas, timeout, message) in [
            (
                None,
                Some(ms(5)),
                "replica_timeout applies only with min_replicas",
            ),
            (
                Some(0),
                None,
                "min_replicas must be at least 1 (leave it out not to wait for replicas)",
            ),
            (
                Some(1),
                Some(Duration::from_micros(1500)),
                "replica_timeout must be a whole number of milliseconds, at least 1 ms",
            ),
            (
                Some(1),
                Some(ms(2000)),
                "replica_timeout (2s) must be shorter than read_timeout (2s): the WAIT for \
                 replicas runs under the read timeout",
            ),
        ] {
            let err = ReplicaAcks::from_options(replicas, timeout, read).unwrap_err();
            assert_eq!(err.code(), crate::ErrorCode::InvalidArgument);
            assert_eq!(err.message(), message);
        }
    }
}
