//! The options of a [`RedisBackend`] and `build()`: the builder's options merged over the
//! URL's, checked before any I/O, then the pool opened for one server, a Cluster or the
//! primary behind Sentinels (with its release-watch source).

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use super::client::ClientFactory;
use super::cluster::ClusterConnector;
use super::config::{ParsedUrl, Timeouts, Topology, parse_url};
use super::driver::RedisBackend;
use super::errors::{LastFailure, Server};
use super::layout::{DEFAULT_PREFIX, KeyLayout, Keys, validate_prefix};
use super::list::DEFAULT_LIST_SCAN_BUDGET;
use super::pool::{Connector, Pool, Target};
use super::replicas::ReplicaAcks;
use super::sentinel::SentinelPrimary;
use super::store::Store;
use super::watch::WatchSource;
use crate::error::{LockError, Result};
use crate::pool_options::{PoolOptions, Source};

/// Options for a [`RedisBackend`]. Defaults: prefix `syncguard`, the TypeScript-compatible
/// layout (the cluster layout on a Cluster), 8 pooled connections, connect/read/write timeouts
/// of 2 s, pool checkout timeout of 3 s, no cleanup in `is_locked`, no `min_replicas`.
#[derive(Clone)]
#[must_use = "call build() to get a backend"]
pub struct RedisBuilder {
    url: Option<String>,
    pool: Option<r2d2::Pool<redis::Client>>,
    key_prefix: Option<String>,
    layout: Option<KeyLayout>,
    min_replicas: Option<u32>,
    replica_timeout: Option<Duration>,
    options: PoolOptions,
    read_timeout: Duration,
    write_timeout: Duration,
    list_scan_budget: Option<usize>,
}

impl Default for RedisBuilder {
    fn default() -> Self {
        RedisBuilder {
            url: None,
            pool: None,
            key_prefix: None,
            layout: None,
            min_replicas: None,
            replica_timeout: None,
            options: PoolOptions::default(),
            read_timeout: Duration::from_secs(2),
            write_timeout: Duration::from_secs(2),
            list_scan_budget: None,
        }
    }
}

impl RedisBackend {
    /// Connects to the server at `url` with the default options (see [`RedisBuilder::url`]).
    pub fn connect(url: &str) -> Result<RedisBackend> {
        Self::builder().url(url).build()
    }

    /// Options beyond the URL.
    pub fn builder() -> RedisBuilder {
        RedisBuilder::default()
    }
}

impl RedisBuilder {
    /// Where Redis is:
    /// - one server: `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS, verified
    ///   against the system's root certificates and any [`tls_ca_file`](Self::tls_ca_file); see
    ///   [TLS](super#tls)) or `redis+unix:///path/to/socket[?db=N]`;
    /// - a Cluster: `redis-cluster://[user:password@]h1:p1,h2:p2[/]` (`rediss-cluster://` with
    ///   TLS), any reachable nodes of it (see [Cluster](super#cluster));
    /// - a primary behind Sentinels: `redis-sentinel://[user:password@]s1:p1,s2:p2/NAME[/db]`
    ///   (`rediss-sentinel://`: TLS to the Sentinels and the primary; the credentials are the
    ///   primary's, `?sentinel_user=&sentinel_password=` the Sentinels' own; see
    ///   [Sentinel](super#sentinel)).
    ///
    /// Parameters: `?prefix=NAME` (the key prefix), `?layout=typescript|cluster` (see
    /// [`KeyLayout`]), `?min_replicas=N&replica_timeout=D` (see [`min_replicas`](Self::min_replicas);
    /// `D` as `500ms`, `2s` or milliseconds), `?list_scan_budget=N` (see
    /// [`list_scan_budget`](Self::list_scan_budget)), `?tls_ca_file=PATH` (TLS only) adds a CA file;
    /// `?protocol=` is passed on; `?db=`, `?user=` and `?pass=` are read for sockets only.
    /// [`build`](RedisBuilder::build) refuses any other parameter, an empty or repeated one, a
    /// fragment (`#insecure`) and a path that is not a database number, naming what is wrong.
    pub fn url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// Use the application's r2d2 pool of `redis::Client` connections (to one server) instead
    /// of a URL. Read and write timeouts are applied to each connection as it is checked out.
    /// Turn `test_on_check_out` off in that pool, or every operation pays an extra round trip.
    /// Unlike syncguard's own pool, such a pool keeps a connection whose read timed out; if
    /// that request was lost on the way, the connection stays out of step until the pool
    /// drops it, so prefer [`url`](RedisBuilder::url) where timeouts are expected.
    pub fn pool(mut self, pool: r2d2::Pool<redis::Client>) -> Self {
        self.pool = Some(pool);
        self
    }

    /// The namespace of every key (default `syncguard`; one trailing `:` is dropped). Must
    /// not be empty, and must leave room for keys: at most 948 bytes, so that index keys are
    /// never hashed. It may not end in an `id` or `fence` segment, which would overlap those
    /// namespaces of a shorter prefix, and with the cluster layout it may not contain `{` or
    /// `}`.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.key_prefix = Some(prefix.into());
        self
    }

    /// How keys are named (see [`KeyLayout`]; the URL's `?layout=` otherwise). Default: the
    /// TypeScript-compatible layout on one server or behind Sentinels, the cluster layout on a
    /// Cluster, which refuses the other.
    pub fn layout(mut self, layout: KeyLayout) -> Self {
        self.layout = Some(layout);
        self
    }

    /// After each acquisition, wait until at least `replicas` replicas have it (`WAIT`), for at
    /// most [`replica_timeout`](Self::replica_timeout); with fewer acknowledgements the lock
    /// is released again and the acquisition fails with `ServiceUnavailable` (transient: the
    /// `Locker` retries). This keeps fences from repeating after a failover; see
    /// [Failover](super#failover) for exactly what it does and does not guarantee. Default: no
    /// waiting (the URL's `?min_replicas=` otherwise).
    pub fn min_replicas(mut self, replicas: u32) -> Self {
        self.min_replicas = Some(replicas);
        self
    }

    /// How long an acquisition waits for [`min_replicas`](Self::min_replicas)
    /// acknowledgements (default: half the read timeout, 1 s with the defaults; the URL's
    /// `?replica_timeout=` otherwise). Must be shorter than the read timeout, which the
    /// `WAIT` runs under.
    pub fn replica_timeout(mut self, timeout: Duration) -> Self {
        self.replica_timeout = Some(timeout);
        self
    }

    /// The most keys one listing ([`LockBackend::list`](crate::LockBackend::list), of any
    /// [`LeaseKind`](crate::LeaseKind)) asks `SCAN` to
    /// examine, in all (the sum of its `COUNT`s, across a Cluster's primaries; default
    /// [`DEFAULT_LIST_SCAN_BUDGET`], at least 1; the URL's `?list_scan_budget=` otherwise).
    /// Every key of the database counts, under the listing's prefix or not: on a server shared
    /// with other data, raise it to the size of the database (or keep the locks in a database
    /// of their own) for listings that cover every lock. A listing that runs out says so
    /// ([`Coverage::WorkBoundReached`](crate::Coverage::WorkBoundReached)); see
    /// [Listing](super#listing).
    pub fn list_scan_budget(mut self, keys: usize) -> Self {
        self.list_scan_budget = Some(keys.max(1));
        self
    }

    crate::pool_options::pool_option_setters!("tls_ca_file");

    /// Timeout for reading a reply. Defaults to 2 s.
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// Timeout for sending a request. Defaults to 2 s.
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.write_timeout = timeout;
        self
    }

    /// Validates the options (`InvalidArgument`, before any I/O) and, for a URL, opens one
    /// connection to check the servers and the credentials (`ServiceUnavailable`,
    /// `AuthFailed`, `NetworkTimeout` otherwise, with a message naming the server's
    /// `host:port` and the cause): for a Cluster, one node and its slot map; behind Sentinels,
    /// the primary they name.
    pub fn build(self) -> Result<RedisBackend> {
        let source = self.options.source(
            "Redis",
            self.url,
            self.pool,
            &[
                ("read_timeout", self.read_timeout),
                ("write_timeout", self.write_timeout),
            ],
        )?;
        let key_prefix = match &self.key_prefix {
            Some(prefix) => Some(validate_prefix(prefix, "key_prefix")?),
            None => None,
        };
        let timeouts = Timeouts {
            connect: self.options.connect_timeout,
            read: self.read_timeout,
            write: self.write_timeout,
            checkout: self.options.pool_timeout,
        };
        // Everything is checked before any I/O; the builder's options win over the URL's.
        let (source, parsed) = match source {
            Source::Pool(pool) => (Some(pool), None),
            Source::Url(url) => (None, Some(parse_url(&url)?)),
        };
        let url_prefix = match parsed.as_ref().and_then(|p| p.prefix.as_deref()) {
            Some(prefix) => Some(validate_prefix(prefix, "URL parameter `prefix`")?),
            None => None,
        };
        let prefix = key_prefix
            .or(url_prefix)
            .unwrap_or_else(|| DEFAULT_PREFIX.to_owned());
        let cluster = parsed
            .as_ref()
            .is_some_and(|p| matches!(p.topology, Topology::Cluster { .. }));
        let layout = self
            .layout
            .or(parsed.as_ref().and_then(|p| p.layout))
            .unwrap_or(if cluster {
                KeyLayout::Cluster
            } else {
                KeyLayout::TypeScript
            });
        if cluster && layout != KeyLayout::Cluster {
            return Err(LockError::invalid_argument(
                "a Redis Cluster needs the cluster layout: the TypeScript layout puts a lock's \
                 keys in different hash slots (leave `layout` out, or set it to cluster)",
            ));
        }
        let keys = Keys::new(prefix, layout)?;
        let replicas = ReplicaAcks::from_options(
            self.min_replicas
                .or(parsed.as_ref().and_then(|p| p.min_replicas)),
            self.replica_timeout
                .or(parsed.as_ref().and_then(|p| p.replica_timeout)),
            timeouts.read,
        )?;

        let parsed_budget = parsed.as_ref().and_then(|p| p.list_scan_budget);
        let (pool, watch, server, display_url) = match (source, parsed) {
            (Some(pool), _) => (
                Pool::External(pool, timeouts),
                None,
                Arc::new(Server::application_pool(timeouts)),
                "<application pool>".to_owned(),
            ),
            (None, Some(parsed)) => {
                let ca_file = self.options.ca_file(parsed.ca_file.as_deref());
                let (pool, watch, server) =
                    open(&parsed, ca_file, timeouts, self.options.pool_size)?;
                (pool, Some(watch), server, parsed.display)
            }
            (None, None) => {
                return Err(LockError::internal("a Redis backend without a source"));
            }
        };
        Ok(RedisBackend {
            store: Store { pool, server, keys },
            watch,
            cleanup_in_is_locked: self.options.cleanup_in_is_locked,
            replicas,
            display_url,
            list_scan_budget: self
                .list_scan_budget
                .or(parsed_budget)
                .unwrap_or(DEFAULT_LIST_SCAN_BUDGET),
        })
    }
}

/// Opens syncguard's own pool for a parsed URL, after checking one connection.
fn open(
    parsed: &ParsedUrl,
    ca_file: Option<&std::path::Path>,
    timeouts: Timeouts,
    pool_size: u32,
) -> Result<(Pool, WatchSource, Arc<Server>)> {
    let server = Arc::new(Server::from_url(
        parsed.location.clone(),
        parsed.secrets.clone(),
        timeouts,
        parsed.tls,
    ));
    let clients = ClientFactory::new(parsed.tls, ca_file)?;
    let last_failure = LastFailure::default();
    fn pool_builder<M: r2d2::ManageConnection>(size: u32, checkout: Duration) -> r2d2::Builder<M> {
        r2d2::Pool::builder()
            .max_size(size)
            .min_idle(Some(0))
            .test_on_check_out(false)
            .connection_timeout(checkout)
            .error_handler(Box::new(r2d2::NopErrorHandler))
    }
    let own = |target: Target, sentinel: Option<Arc<SentinelPrimary>>| -> Result<Pool> {
        let connector = Connector::new(target, Arc::clone(&server), timeouts, last_failure.clone());
        connector.probe()?;
        Ok(Pool::Own {
            pool: pool_builder(pool_size, timeouts.checkout).build_unchecked(connector.clone()),
            connector,
            last_failure: last_failure.clone(),
            sentinel,
        })
    };
    let (pool, watch) = match &parsed.topology {
        Topology::Single => {
            let client = clients.client(&parsed.client_url, &server)?;
            let watch = WatchSource::Server(Box::new(client.clone()), timeouts);
            (own(Target::Fixed(Box::new(client)), None)?, watch)
        }
        Topology::Sentinel(spec) => {
            let primary = Arc::new(SentinelPrimary::new(spec.clone(), clients, timeouts));
            let watch = WatchSource::Sentinel(Arc::clone(&primary), Arc::clone(&server), timeouts);
            let target = Target::Sentinel(Arc::clone(&primary));
            (own(target, Some(primary))?, watch)
        }
        Topology::Cluster { nodes, addresses } => {
            let node_clients = nodes
                .iter()
                .map(|node| clients.client(node, &server))
                .collect::<Result<Vec<_>>>()?;
            let seeds = addresses
                .iter()
                .cloned()
                .zip(node_clients.iter().cloned())
                .collect();
            let connector = ClusterConnector::new(
                nodes,
                seeds,
                &clients,
                Arc::clone(&server),
                timeouts,
                last_failure.clone(),
            )?;
            connector.probe()?;
            let pool = Pool::Cluster(
                pool_builder(pool_size, timeouts.checkout).build_unchecked(connector),
                last_failure,
            );
            (pool, WatchSource::Cluster(node_clients, timeouts))
        }
    };
    Ok((pool, watch, server))
}

impl fmt::Debug for RedisBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let url = self
            .url
            .as_deref()
            .map(|url| parse_url(url).map_or_else(|_| "<malformed>".to_owned(), |p| p.display));
        f.debug_struct("RedisBuilder")
            .field("url", &url)
            .field("pool", &self.pool.as_ref().map(|_| "<application pool>"))
            .field("key_prefix", &self.key_prefix)
            .field("layout", &self.layout)
            .field("min_replicas", &self.min_replicas)
            .field("replica_timeout", &self.replica_timeout)
            .field("options", &self.options)
            .field("read_timeout", &self.read_timeout)
            .field("write_timeout", &self.write_timeout)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each bad URL or option, the message it gets, all `InvalidArgument` and before any I/O
    /// (nothing listens on port 1: a row that connected would fail otherwise).
    #[test]
    fn bad_urls_and_options_are_refused_by_name_before_io() {
        let url = |url: &str| RedisBackend::builder().url(url);
        let at = |builder: RedisBuilder| builder.url("redis://:hunter2@127.0.0.1:1/");
        let rows: Vec<(RedisBuilder, &str)> = vec![
            (
                url("redis://:hunter2@127.0.0.1:1/?prefx=myapp"),
                "unknown Redis URL parameter `prefx` (did you mean `prefix`?); known parameters: \
                 prefix, tls_ca_file, layout, min_replicas, replica_timeout, list_scan_budget, \
                 protocol",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix="),
                "the Redis URL parameter `prefix` is empty: give it a value or leave it out",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix=a&prefix=b"),
                "the Redis URL parameter `prefix` is given twice",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix=:"),
                "the Redis URL parameter `prefix` is empty: leave it out for the default \
                 `syncguard`, or give a namespace such as `myapp`",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?prefix=app:fence"),
                "the Redis URL parameter `prefix` may not end in an `id` or `fence` segment (got \
                 \"app:fence\"): its locks would overlap another prefix's index or fence keys",
            ),
            (
                url("http://:hunter2@127.0.0.1:1/"),
                "not a Redis URL (scheme \"http\"); expected redis://, rediss://, redis+unix://, \
                 unix://, redis-cluster://, rediss-cluster://, redis-sentinel://, \
                 rediss-sentinel://",
            ),
            (url("  "), "the Redis URL is empty"),
            (
                url("redis://:hunter2@127.0.0.1:1/?db=2"),
                "the Redis URL parameter `db` is read only for unix sockets (redis+unix://); for \
                 redis:// and rediss:// give the database as the path: redis://host:port/2",
            ),
            (
                url("redis://127.0.0.1:1/?pass=hunter2"),
                "the Redis URL parameter `pass` is read only for unix sockets (redis+unix://); \
                 for redis:// and rediss:// give them before the host: \
                 redis://user:password@host:port/",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/two"),
                "the path of a Redis URL must be a database number (0, 1, …): \
                 redis://host:port/2",
            ),
            (
                url("rediss://:hunter2@127.0.0.1:1/#insecure"),
                "a Redis URL takes no fragment (`#…`); `#insecure` (TLS without certificate \
                 checks) is not supported",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?protocol="),
                "the Redis URL parameter `protocol` must be resp2 or resp3 (or 2 or 3)",
            ),
            (
                url("redis+unix:///run/redis.sock?pass=hunter2&db=x"),
                "the Redis URL parameter `db` must be a database number (0, 1, …): ?db=2",
            ),
            (
                url("redis+unix:///run/redis.sock?pass=hunter2&db=1&db=2"),
                "the Redis URL parameter `db` is given twice",
            ),
            (
                url("redis+unix:///run/redis.sock?pass=hunter2&prefx=a"),
                "unknown Redis URL parameter `prefx` (did you mean `prefix`?); known parameters: \
                 prefix, tls_ca_file, layout, min_replicas, replica_timeout, list_scan_budget, \
                 protocol, db, user, pass",
            ),
            (url("redis:///"), "the Redis URL names no host"),
            (
                url("redis://:hunter2@127.0.0.1:1/?layout=flat"),
                "the Redis URL parameter `layout` must be typescript or cluster",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?min_replicas=0"),
                "the Redis URL parameter `min_replicas` must be a number of replicas, at least 1",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?min_replicas=1&replica_timeout=soon"),
                "the Redis URL parameter `replica_timeout` must be a duration such as 500ms, 2s \
                 or 1500 (milliseconds)",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?replica_timeout=5ms"),
                "replica_timeout applies only with min_replicas",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?min_replicas=1&replica_timeout=2s"),
                "replica_timeout (2s) must be shorter than read_timeout (2s): the WAIT for \
                 replicas runs under the read timeout",
            ),
            (
                url("redis-cluster://:hunter2@127.0.0.1:1,127.0.0.1:2/?layout=typescript"),
                "a Redis Cluster needs the cluster layout: the TypeScript layout puts a lock's \
                 keys in different hash slots (leave `layout` out, or set it to cluster)",
            ),
            (
                RedisBackend::builder()
                    .url("redis-cluster://:hunter2@127.0.0.1:1/")
                    .layout(KeyLayout::TypeScript),
                "a Redis Cluster needs the cluster layout: the TypeScript layout puts a lock's \
                 keys in different hash slots (leave `layout` out, or set it to cluster)",
            ),
            (
                url("redis-cluster://:hunter2@127.0.0.1:1/0"),
                "a redis-cluster:// URL takes no path: a Cluster has database 0 only \
                 (redis-cluster://h1:p1,h2:p2/?prefix=…)",
            ),
            (
                url("redis-cluster://:hunter2@127.0.0.1:1/?prefix=a%7Bb"),
                "a Redis key prefix for the cluster layout may not contain `{` or `}`: they \
                 would become the keys' hash tag",
            ),
            (
                url("redis-cluster://:hunter2@127.0.0.1:1/?sentinel_password=x"),
                "unknown Redis URL parameter `sentinel_password`; known parameters: prefix, \
                 tls_ca_file, layout, min_replicas, replica_timeout, list_scan_budget, protocol",
            ),
            (
                url("redis-cluster://:hunter2@127.0.0.1:1/?list_scan_budget=0"),
                "the Redis URL parameter `list_scan_budget` must be a number of keys, at least 1",
            ),
            (
                url("redis://:hunter2@127.0.0.1:1/?list_scan_budget=all"),
                "the Redis URL parameter `list_scan_budget` must be a number of keys, at least 1",
            ),
            (
                url("redis-sentinel://:hunter2@127.0.0.1:1/"),
                "a redis-sentinel:// URL names the primary as its path: \
                 redis-sentinel://s1:26379,s2:26379/mymaster",
            ),
            (
                url("redis-sentinel://:hunter2@127.0.0.1:1/mymaster/x"),
                "the database of a Sentinel URL must be a database number (0, 1, …): \
                 redis-sentinel://s1:26379/mymaster/2",
            ),
            (
                url("redis-sentinel://:hunter2@127.0.0.1:1/mymaster?sentinel_user=u"),
                "the Redis URL parameter `sentinel_user` needs `sentinel_password`",
            ),
            (
                url("redis-sentinel://:hunter2@127.0.0.1:1/mymaster?db=2"),
                "the Redis URL parameter `db` is read only for unix sockets (redis+unix://); for \
                 redis:// and rediss:// give the database as the path: redis://host:port/2",
            ),
            (
                at(RedisBackend::builder().key_prefix("")),
                "the Redis key_prefix is empty: leave it out for the default `syncguard`, or give \
                 a namespace such as `myapp`",
            ),
            (
                at(RedisBackend::builder().key_prefix(":")),
                "the Redis key_prefix is empty: leave it out for the default `syncguard`, or give \
                 a namespace such as `myapp`",
            ),
            (
                RedisBackend::builder(),
                "the Redis backend needs a URL or a pool",
            ),
            (
                at(RedisBackend::builder().pool_size(0)),
                "pool_size must be at least 1",
            ),
            (
                at(RedisBackend::builder().connect_timeout(Duration::ZERO)),
                "connect_timeout must be above zero",
            ),
            (
                at(RedisBackend::builder().pool_timeout(Duration::ZERO)),
                "pool_timeout must be above zero",
            ),
        ];
        for (builder, message) in rows {
            crate::error::assert_refused_with(builder.build(), message);
        }
    }

    #[test]
    fn builder_debug_hides_the_password() {
        let shown = format!("{:?}", RedisBackend::builder().url("redis://u:hunter2@h/"));
        assert!(!shown.contains("hunter2"), "{shown}");
    }

    /// `tls_ca_file`: only with TLS, only for connections syncguard opens, and a file that
    /// cannot be read is refused naming its path — all before any I/O.
    #[test]
    fn the_tls_ca_file_needs_tls_and_a_readable_file() {
        let missing = std::env::temp_dir().join("syncguard-no-such-ca.pem");
        let unreadable = format!(
            "the CA file {} cannot be read: No such file or directory (os error 2)",
            missing.display()
        );
        let pool = r2d2::Pool::builder()
            .build_unchecked(redis::Client::open("redis://127.0.0.1:1/").unwrap());
        let rows: Vec<(RedisBuilder, &str)> = vec![
            (
                RedisBackend::builder().url("redis://:hunter2@127.0.0.1:1/?tls_ca_file=/ca.pem"),
                "the Redis URL parameter `tls_ca_file` needs TLS: use a rediss:// URL",
            ),
            (
                RedisBackend::builder().url(format!(
                    "rediss://:hunter2@127.0.0.1:1/?tls_ca_file={}",
                    missing.display()
                )),
                &unreadable,
            ),
            (
                RedisBackend::builder()
                    .url("rediss://:hunter2@127.0.0.1:1/")
                    .tls_ca_file(&missing),
                &unreadable,
            ),
            (
                RedisBackend::builder().pool(pool).tls_ca_file(&missing),
                "tls_ca_file applies to connections syncguard opens from a URL; the \
                 application's pool has TLS settings of its own",
            ),
        ];
        for (builder, message) in rows {
            crate::error::assert_refused_with(builder.build(), message);
        }
    }
}
