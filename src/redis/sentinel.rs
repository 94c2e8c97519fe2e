//! Sentinel: finding the primary of a named Redis deployment, and finding it again after a
//! failover.
//!
//! redis-rs' own Sentinel client opens its connections without timeouts, so the resolution is
//! done here, with syncguard's deadlines on every step: each Sentinel in turn is asked
//! `SENTINEL get-master-addr-by-name NAME`, and the address it names is accepted only if that
//! server answers `ROLE` with `master` (a Sentinel may lag behind a failover). The result is
//! kept until a connection shows it is stale — a `READONLY` answer (the server was demoted), a
//! dropped or refused connection, a timeout — which bumps the *generation*: connections of
//! older generations are dropped from the pool and the next connection asks the Sentinels
//! again.

use std::sync::{Mutex, PoisonError};

use redis::{Client, Connection, Value};

use super::client::ClientFactory;
use super::config::{SentinelSpec, Timeouts};
use super::errors::{Phase, Server, map_error};
use crate::error::{ErrorCode, LockError, Result};

/// The primary as last resolved, and the generation of that resolution.
struct Resolved {
    generation: u64,
    current: Option<(Client, String)>,
}

/// The primary behind a set of Sentinels; see the module docs.
pub(crate) struct SentinelPrimary {
    spec: SentinelSpec,
    clients: ClientFactory,
    timeouts: Timeouts,
    resolved: Mutex<Resolved>,
}

impl SentinelPrimary {
    pub fn new(spec: SentinelSpec, clients: ClientFactory, timeouts: Timeouts) -> Self {
        SentinelPrimary {
            spec,
            clients,
            timeouts,
            resolved: Mutex::new(Resolved {
                generation: 0,
                current: None,
            }),
        }
    }

    /// A client for the primary, resolved now if the last resolution was dropped, and the
    /// generation it belongs to.
    pub fn client(&self, server: &Server) -> Result<(Client, u64)> {
        // Held while resolving: concurrent callers wait for one resolution instead of each
        // asking every Sentinel.
        let mut resolved = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((client, _)) = &resolved.current {
            return Ok((client.clone(), resolved.generation));
        }
        let (client, address) = self.resolve(server)?;
        log::debug!(
            "syncguard: Sentinel primary `{}` is at {address}",
            self.spec.master
        );
        resolved.current = Some((client.clone(), address));
        Ok((client, resolved.generation))
    }

    /// The current generation: connections of older ones are stale.
    pub fn generation(&self) -> u64 {
        self.resolved
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .generation
    }

    /// Forgets the primary resolved in `generation` (a connection to it failed or was refused
    /// as read-only), so that the next connection asks the Sentinels again. A later generation
    /// is left alone: another caller already re-resolved.
    pub fn invalidate(&self, generation: u64) {
        let mut resolved = self.resolved.lock().unwrap_or_else(PoisonError::into_inner);
        if resolved.generation == generation {
            if let Some((_, address)) = resolved.current.take() {
                log::debug!(
                    "syncguard: Sentinel primary `{}` at {address} is stale; asking the \
                     Sentinels again",
                    self.spec.master
                );
            }
            resolved.generation += 1;
        }
    }

    /// Asks each Sentinel in turn; the first address that answers `ROLE` as a primary wins.
    /// When none does, the code says what every step met: credentials a server refused →
    /// `AuthFailed` (a configuration error, whatever else failed); nothing but timeouts →
    /// `NetworkTimeout`; no Sentinel knows the name → `InvalidArgument`; otherwise
    /// `ServiceUnavailable` (transient: a failover may be under way).
    fn resolve(&self, server: &Server) -> Result<(Client, String)> {
        let master = &self.spec.master;
        let mut failures = Vec::new();
        let mut codes = Vec::new();
        let mut unknown = 0;
        for (url, address) in self
            .spec
            .sentinels
            .iter()
            .zip(&self.spec.sentinel_addresses)
        {
            match self.ask(url, server) {
                Ok(Some((host, port))) => {
                    let primary = self.spec.primary_url.at(&host, port);
                    let shown = format!("{host}:{port}");
                    match self.check_primary(&primary, server) {
                        Ok(client) => return Ok((client, shown)),
                        Err(why) => {
                            codes.push(why.code);
                            failures.push(format!(
                                "sentinel {address} named {shown}, which {}",
                                why.text
                            ));
                        }
                    }
                }
                Ok(None) => {
                    unknown += 1;
                    failures.push(format!("sentinel {address} knows no primary `{master}`"));
                }
                Err(why) => {
                    codes.push(why.code);
                    failures.push(format!("sentinel {address}: {}", why.text));
                }
            }
        }
        let code = if unknown == self.spec.sentinels.len() {
            // Every Sentinel answered, and none knows the name: a configuration error.
            ErrorCode::InvalidArgument
        } else if codes.contains(&ErrorCode::AuthFailed) {
            ErrorCode::AuthFailed
        } else if unknown == 0 && codes.iter().all(|&code| code == ErrorCode::NetworkTimeout) {
            ErrorCode::NetworkTimeout
        } else {
            ErrorCode::ServiceUnavailable
        };
        Err(LockError::new(
            code,
            format!(
                "cannot find the Redis primary `{master}` through its sentinels: {}",
                failures.join("; ")
            ),
        ))
    }

    /// One Sentinel's answer: the primary's address, or `None` if it knows no such name.
    fn ask(
        &self,
        url: &str,
        server: &Server,
    ) -> std::result::Result<Option<(String, u16)>, Failure> {
        let mut connection = self.open(url, server)?;
        let answer: Option<(String, String)> = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.spec.master)
            .query(&mut connection)
            .map_err(|e| short_cause(e, server))?;
        match answer {
            None => Ok(None),
            Some((host, port)) => match port.parse::<u16>() {
                Ok(port) => Ok(Some((host, port))),
                Err(_) => Err(Failure::unavailable(
                    "answered with a port that is not a number",
                )),
            },
        }
    }

    /// A client for `url` if that server says it is a primary; why not otherwise.
    fn check_primary(&self, url: &str, server: &Server) -> std::result::Result<Client, Failure> {
        let client = self
            .clients
            .client(url, server)
            .map_err(|e| Failure::from_error(&e))?;
        let mut connection = self
            .connect(&client, server)
            .map_err(|why| why.map(|text| format!("cannot be reached ({text})")))?;
        let role: Value = redis::cmd("ROLE").query(&mut connection).map_err(|e| {
            short_cause(e, server).map(|text| format!("did not answer ROLE ({text})"))
        })?;
        match role {
            Value::Array(items) => match items.first() {
                Some(Value::BulkString(role)) if role.as_slice() == b"master" => Ok(client),
                Some(Value::BulkString(role)) => Err(Failure::unavailable(format!(
                    "says it is a {} (a failover is under way)",
                    String::from_utf8_lossy(role)
                ))),
                _ => Err(Failure::unavailable("answered ROLE strangely")),
            },
            _ => Err(Failure::unavailable("answered ROLE strangely")),
        }
    }

    fn open(&self, url: &str, server: &Server) -> std::result::Result<Connection, Failure> {
        let client = self
            .clients
            .client(url, server)
            .map_err(|e| Failure::from_error(&e))?;
        self.connect(&client, server)
    }

    fn connect(
        &self,
        client: &Client,
        server: &Server,
    ) -> std::result::Result<Connection, Failure> {
        let connection = client
            .get_connection_with_timeout(self.timeouts.connect)
            .map_err(|e| short_cause(e, server))?;
        connection
            .set_read_timeout(Some(self.timeouts.read))
            .and_then(|()| connection.set_write_timeout(Some(self.timeouts.write)))
            .map_err(|e| short_cause(e, server))?;
        Ok(connection)
    }
}

/// Why one step of a resolution failed: the code of its error, and the words for the message.
struct Failure {
    code: ErrorCode,
    text: String,
}

impl Failure {
    fn unavailable(text: impl Into<String>) -> Failure {
        Failure {
            code: ErrorCode::ServiceUnavailable,
            text: text.into(),
        }
    }

    fn from_error(error: &LockError) -> Failure {
        Failure {
            code: error.code(),
            text: error.message().to_owned(),
        }
    }

    fn map(self, words: impl FnOnce(String) -> String) -> Failure {
        Failure {
            code: self.code,
            text: words(self.text),
        }
    }
}

/// The cause of a failed Sentinel step, without the "cannot connect to Redis at …" framing
/// (the caller names the Sentinel), and its code.
fn short_cause(error: redis::RedisError, server: &Server) -> Failure {
    let error = map_error(error, server, Phase::Connect);
    let message = error.message();
    let at = format!("cannot connect to Redis {}: ", server.location());
    Failure {
        code: error.code(),
        text: message.strip_prefix(&at).unwrap_or(message).to_owned(),
    }
}
