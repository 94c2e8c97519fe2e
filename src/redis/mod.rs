//! The Redis backend: one Lua script per operation over a pooled blocking connection, with
//! Redis `TIME` as the clock — on one server (storing locks exactly as the TypeScript
//! SyncGuard does), on a Redis Cluster, or on a primary behind Sentinels.
//!
//! ```no_run
//! use syncguard::{Locker, redis::RedisBackend};
//!
//! let locker = Locker::new(RedisBackend::connect("redis://127.0.0.1/")?);
//! let guard = locker.lock("nightly-report")?;
//! println!("fence {}", guard.fence());
//!
//! // A Cluster (any of its nodes; the client finds the rest), or the primary three
//! // Sentinels know as `mymaster`, waiting for one replica after each acquisition:
//! let cluster = RedisBackend::connect("redis-cluster://10.0.0.1:7000,10.0.0.2:7000/")?;
//! let sentinel = RedisBackend::connect(
//!     "redis-sentinel://10.0.0.1:26379,10.0.0.2:26379,10.0.0.3:26379/mymaster?min_replicas=1",
//! )?;
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! # Storage
//!
//! For a key `K` under the prefix `P` (default `syncguard`), with `msk` =
//! [`make_storage_key`](crate::driver::make_storage_key) at Redis' limit of 1000 bytes with 26
//! reserved, in the default, TypeScript-compatible layout ([`KeyLayout::TypeScript`]):
//!
//! | Redis key | value | TTL |
//! |---|---|---|
//! | `L = msk(P, K)` | JSON `{"lockId","expiresAtMs","acquiredAtMs","key","fence"}` | the lease's `PX` |
//! | `msk(P, "id:" + lockId)` | `L` (the reverse index release and extend resolve through) | the same `PX` |
//! | `msk(P, "fence:" + L)` | the fence counter (`INCR`) | none: never expires, never deleted |
//!
//! As in the TypeScript SyncGuard, a user key such as `fence:syncguard:job` names the same
//! Redis key as the fence counter of `job`. Every script checks what it finds before writing:
//! such a collision fails with `Internal` instead of overwriting the counter or an index
//! entry, and a fence counter is never deleted.
//!
//! # Key layouts
//!
//! Those three keys of a lock lie in different hash slots, and a Cluster runs a script only on
//! keys of one slot (`CROSSSLOT` otherwise). The cluster layout ([`KeyLayout::Cluster`]) names
//! them with hash tags instead: `P:{T}` (the record) and `P:fence:{T}` (the counter) share the
//! slot of the tag `T`, the key itself (or its hash, for long keys and keys with braces), and
//! `P:id:{lockId}` (the index entry) lies in the lock id's own slot. Lock ids are the
//! specification's in every layout — 16 bytes from the OS CSPRNG, 22 base64url characters, 128
//! bits — never chosen to hash to their lock's slot (that would cost 14 of the 128 bits). So
//! the scripts touch the record and counter only, and the index entry is written, renewed and
//! deleted by a plain command sent together with each script — one round trip in both cases:
//!
//! | operation (cluster layout) | one server / Sentinel | Cluster |
//! |---|---|---|
//! | acquire | 1 pipeline [script, `SET I L PX ttl`] | both at once, one to each node |
//! | release through a guard (key known) | 1 pipeline [script, `DEL I`] | both at once |
//! | extend through a guard | 1 pipeline [script, `PEXPIRE I ttl`] | both at once |
//! | by bare lock id (`release --lock-id`, lookup) | `GET I` first, then as above | `GET I` first, then as above |
//! | batch renewal (heartbeat) | 1 pipeline for all | 1 pipeline per node, all at once |
//!
//! On a Cluster, every command is written to its node before any reply is read; redis-rs'
//! cluster client still routes, redirects and retries each command (its own cross-node
//! pipeline only runs over its node connections, not over syncguard's, which carry the
//! deadlines).
//!
//! Crash windows: an index entry may point at a record it does not own (written beside a
//! refused acquisition, or left by a release whose `DEL I` failed); every script compares the
//! lock id stored in the record, so such an entry answers "not found" and never releases or
//! extends another holder's lock, and it expires with its TTL. On a Cluster the record and the
//! index entry live on different nodes, so one write can fail while the other applies: a
//! granted acquisition whose index entry could not be written is released again and fails with
//! a transient code (nothing stays locked that its lock id cannot find); an extension or release
//! whose index command failed stands, with a warning in the log, and until the lock expires a
//! bare lock id may not find it. A process that dies between the two writes leaves the same
//! states; a guard, which knows its key, never reads the index.
//! index. The rules, exactly, are in
//! [`KeyLayout`]'s docs; `tests/data/redis_cluster_keys.json` pins them.
//!
//! | | one server / Sentinel | Cluster |
//! |---|---|---|
//! | TypeScript layout (default on one server) | yes: shares locks with the TypeScript SyncGuard | refused |
//! | cluster layout (`?layout=cluster`, [`RedisBuilder::layout`]) | yes: the same keys a Cluster would hold | the only one (default) |
//!
//! **The TypeScript SyncGuard cannot share locks on a Cluster** (its keys are not
//! hash-tagged), nor with a backend in the cluster layout anywhere. Choosing the cluster layout
//! on a single server lets a deployment move to a Cluster without a flag day: keys keep their
//! names, and a migration (`redis-cli --cluster import`, or replication into a Cluster) carries
//! locks and fence counters over. Switching layouts on live data is not such a move: the two
//! layouts name different keys, so locks held under one are invisible to the other and fence
//! counters start again; drain the locks and rotate the prefix, or keep the layout.
//!
//! # Cluster
//!
//! `redis-cluster://[user:password@]h1:p1,h2:p2[/?prefix=…]` (`rediss-cluster://` with TLS,
//! verified as below): any nodes of the Cluster; redis-rs' cluster client reads the slot map
//! and follows `MOVED`/`ASK`, reconnects to nodes and refreshes the map after a failover,
//! repeating a request up to three times with short waits. Connections are pooled (each pooled
//! connection holds one connection per node) and every step has the connect, read and write
//! timeouts; a cluster connection that met a timeout, a lost node or a redirection it could
//! not follow is replaced — also when only some commands of a pipeline (a batch of renewals)
//! met it, since redis-rs' cluster client refreshes its slot map only on a redirection, never
//! when a node refuses the connection: a process whose only traffic is its heartbeat finds the
//! promoted replica with its next renewal's fresh connection. Renewals go lease by lease (see
//! the table above). Waiters hear of releases through any one node (a Cluster delivers
//! `PUBLISH` everywhere). A node that is no Cluster node is refused at `build()`
//! (`InvalidArgument`).
//!
//! Opening a cluster connection: credentials a node refuses → `AuthFailed`; nodes that never
//! answer (or never complete the TCP handshake) → `NetworkTimeout`, after one connect timeout
//! per node tried; otherwise `ServiceUnavailable`, naming each node and its failure.
//! Connections skip redis-rs' `CLIENT SETINFO` (library name and version) when they open:
//! redis-rs awaits each reply of a connection's setup with the whole timeout, also after one
//! timed out, so a silent server would cost a timeout per setup command.
//!
//! # Sentinel
//!
//! `redis-sentinel://[user:password@]s1:p1,s2:p2/NAME[/db][?sentinel_user=…&sentinel_password=…]`
//! (`rediss-sentinel://`: TLS to the Sentinels and to the primary): the credentials before the
//! hosts are the primary's, the `sentinel_*` parameters the Sentinels' own. Each Sentinel in
//! turn is asked for the primary named `NAME` (`SENTINEL get-master-addr-by-name`), and the
//! server it names must answer `ROLE` as a primary; each step has the connect, read and write
//! timeouts. The address is kept until a connection shows it stale: a `READONLY` answer (the
//! server was demoted), a lost or refused connection, or a timeout drops it, with every pooled
//! connection to it, and the next call asks the Sentinels again. Until a Sentinel names a
//! server that acts as primary, calls fail with `ServiceUnavailable` (transient: a `Locker`
//! keeps retrying); a name no Sentinel knows is `InvalidArgument`; credentials a Sentinel or
//! the primary refuses are `AuthFailed`; Sentinels that all time out are `NetworkTimeout`.
//!
//! # Listing
//!
//! [`LockBackend::list`](crate::LockBackend::list) walks the keyspace with `SCAN` (on every
//! primary of a Cluster, one after another; behind Sentinels, on the primary), `MATCH`ing the
//! lock records' names as narrowly as the layout allows, `COUNT 1000`, and reads what it finds
//! in batches of pipelined `GET`s with `TIME`. Only SyncGuard lock records stored under the name
//! their `key` field gives are listed: index entries, fence counters and anything else are
//! skipped, and hashed (long) keys are found by their record's `key`. The work is bounded: at
//! most [`RedisBuilder::list_scan_budget`] keys examined by `SCAN` in all (default
//! [`DEFAULT_LIST_SCAN_BUDGET`]); a listing that runs out answers what it found, with
//! [`Coverage::WorkBoundReached`](crate::Coverage::WorkBoundReached).
//!
//! # Failover
//!
//! Redis replicates asynchronously: a primary that dies can take its last writes with it, and
//! the replica that replaces it continues from what it had. For locks that means a granted
//! lock can vanish (a second holder gets in), and — worse for whoever relies on fences — the
//! fence counter's last `INCR` can be lost, so the promoted replica **hands out a fence
//! again**. None of the peer libraries (Redisson, rslock, the TypeScript SyncGuard) guards
//! against this.
//!
//! `min_replicas=N` (`?min_replicas=N&replica_timeout=D`, or [`RedisBuilder::min_replicas`]):
//! after each successful acquisition, `WAIT N D` on the same connection (on a Cluster, on the
//! primary of the lock's slot). With fewer than `N` acknowledgements within `D`, the lock is
//! released again and the acquisition fails with `ServiceUnavailable` (transient). So every
//! lock and fence a caller is handed is on at least `N` replicas. What that does guarantee:
//! if the replica promoted after a failover is one of those that acknowledged, it has the lock
//! and the counter: the lock stays held and no fence repeats. Sentinel and Cluster promote the
//! replica with the most replicated data, which has everything any acknowledged replica has as
//! long as one of those is still reachable; with `N` equal to the number of replicas, every
//! replica has it. What it does **not** guarantee:
//! - renewals and releases are not waited for: a failover can lose the last renewal (the lock
//!   then expires earlier than its holder was told: the fence grows, so a resource that checks
//!   fences rejects the former holder) or a release (the lock lingers until its TTL);
//! - `WAIT` is not durability: replicas hold the write in memory; losing the primary and those
//!   replicas at once loses it;
//! - a primary cut off from the Sentinels keeps accepting writes until it learns it was
//!   replaced; Redis' own `min-replicas-to-write` on the server bounds that window;
//! - an acquisition that is refused has still consumed a fence number on the old primary:
//!   fences grow, but not always by one.
//!
//! A single server, no replicas: fences survive its restart only if the counter's `INCR` was
//! on disk. That takes `appendonly yes` with `appendfsync always`; with `appendfsync everysec`
//! (Redis' default for AOF) a crash can lose the last second of increments, and RDB snapshots
//! (`save`) alone lose everything since the last snapshot — and the fences with it.
//!
//! # Errors
//!
//! Connection refused, reset or dropped, DNS failure, a server loading or read-only →
//! `ServiceUnavailable`; `NOAUTH`/`WRONGPASS`/`NOPERM` → `AuthFailed`; syntax errors →
//! `InvalidArgument`; read, write or connect timeouts, and a server that accepts connections
//! but never answers → `NetworkTimeout`; no pooled connection free within the pool timeout
//! while the server is reachable → `RateLimited` (when connecting is what fails, the connect
//! error's code instead). A pooled connection found dead (a restarted server) is replaced and
//! the call repeated once, which every script is safe against.
//!
//! **What is stored is checked by one rule, in every operation** (the scripts' shared prelude):
//! a lock record is a JSON object with a 22-character base64url `lockId`, whole-millisecond
//! `expiresAtMs` and `acquiredAtMs` in `0..9e15`, a non-empty `key` and a 15-digit `fence`
//! other than zero; further fields are kept. Anything else under a lock key (another shape,
//! a malformed field, `Infinity`, text that is not JSON, a hash — `WRONGTYPE`), a fence counter
//! that is not a non-negative integer, or one at [`FENCE_MAX`] → `Internal`, naming the
//! Redis key and what is wrong, before anything is written (in the cluster layout, the index
//! entry sent beside a refused acquisition is deleted again).
//!
//! An acquisition whose script was sent but got no answer (a timeout, a connection lost after
//! the request went out) fails marked [in doubt](LockError::in_doubt), with the lock id it was
//! sent under: the server may still apply it.
//!
//! A new connection is opened within `connect_timeout`, all included: TCP and TLS, `AUTH` or
//! `HELLO`, `SELECT`, and one answered command (`PING` without `SELECT`). The call that needs
//! it opens it: one attempt, whose failure is the call's error (not a wait for the pool
//! timeout). `CLIENT SETINFO` is not sent: redis-rs would wait a whole connect timeout for
//! each of its replies from a server that does not answer.
//!
//! Messages name the server (`host:port`, and the database when it is not 0) and the cause:
//! connection refused, host name not resolved, the TLS reason, authentication failed or
//! required, which timeout ran out. They never contain the password:
//! `ServiceUnavailable: cannot connect to Redis at 10.0.0.5:6379: connection refused`.
//!
//! # TLS
//!
//! `rediss://` connects with TLS, always fully verified (the certificate chain and the host
//! name), trusting the system's root certificates plus those of a CA file
//! ([`RedisBuilder::tls_ca_file`], or `?tls_ca_file=PATH` in the URL: a PEM file of one or more
//! certificates, for a private CA). The PostgreSQL and Firestore backends follow the same
//! policy. A certificate that is not trusted, or not valid for the host name in the URL, fails
//! with `ServiceUnavailable` and says so: `cannot connect to Redis at localhost:6380: TLS
//! failure: the server's certificate is not trusted (unknown issuer): …`. A CA file that cannot
//! be read or holds no valid certificate is `InvalidArgument`, naming its path.
//!
//! **rustls' process-wide crypto provider.** redis-rs (1.8) builds the TLS configuration of
//! each connection with rustls' *process-default* provider and offers no way to pass one
//! (redis-rs issue #463); with none installed, rustls picks one from its crate features, and
//! panics if the application's dependency tree enables both *ring* and aws-lc-rs. So the first
//! `rediss://` backend installs *ring* as the process default — only if no provider is
//! installed yet. An application that wants another provider installs it first, and syncguard
//! leaves it alone (the PostgreSQL and Firestore backends never read or change the default):
//!
//! ```no_run
//! // Before the first rediss:// backend: the provider of your choice (aws-lc-rs, say).
//! let _ = rustls::crypto::ring::default_provider().install_default();
//! let backend = syncguard::redis::RedisBackend::connect("rediss://redis.internal:6380/")?;
//! # Ok::<(), syncguard::LockError>(())
//! ```
//!
//! redis-rs also reads the system's certificate store itself for each new connection (although
//! it then trusts the roots syncguard gives it), and refuses to connect when that store
//! reports an error.

mod client;
mod cluster;
mod config;
mod errors;
mod hosts;
mod layout;
mod list;
mod node;
mod pool;
mod replicas;
mod scripts;
mod sentinel;
mod slot;
mod split;
mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use self::client::ClientFactory;
use self::cluster::ClusterConnector;
use self::config::{ParsedUrl, Timeouts, Topology, parse_url};
use self::errors::{LastFailure, Server};
pub use self::layout::KeyLayout;
use self::layout::Keys;
pub use self::list::DEFAULT_LIST_SCAN_BUDGET;
use self::pool::{Connector, Pool, Target};
use self::replicas::ReplicaAcks;
use self::scripts::{Reply, SCRIPTS, Status};
use self::sentinel::SentinelPrimary;
use self::slot::key_slot;
use self::watch::{Opener, RedisWatch};
use crate::backend::{Capabilities, TimeAuthority};
#[cfg(test)]
use crate::driver::make_storage_key;
use crate::driver::{
    Acquisition, Driver, Extension, FENCE_MAX, Find, Holder, Key, KeyPrefix, LOCK_ID_LENGTH,
    LeaseRef, ListLimit, LockId, LockList, LockRecord, OnRelease, Outcome, ReleaseWatch,
    TIME_TOLERANCE_MS, Ttl,
};
use crate::error::{ErrorCode, LockError, Result};
use crate::fence::Fence;
use crate::net::{Source, pool_source};

/// Redis' storage-key limit in bytes.
pub const STORAGE_KEY_LIMIT: usize = 1000;
/// Bytes [`make_storage_key`](crate::driver::make_storage_key) keeps free for derived suffixes.
pub const STORAGE_KEY_RESERVE: usize = 26;
/// The default key prefix, shared with the TypeScript SyncGuard.
pub const DEFAULT_PREFIX: &str = "syncguard";
/// How long past expiry a lock must be before the opt-in cleanup in `is_locked` deletes it,
/// so that it can never race a renewal.
pub const CLEANUP_GUARD_MS: i64 = 2000;

/// The namespaces under the prefix that hold index entries and fence counters.
const RESERVED_SEGMENTS: [&str; 2] = ["id", "fence"];

/// Distributed locks in Redis: one server, a Cluster, or a primary behind Sentinels. See the
/// [module docs](self) for the storage layouts and what each topology guarantees.
///
/// Built with [`RedisBackend::connect`] or [`RedisBackend::builder`]; cheap to share behind a
/// [`Locker`](crate::Locker) across threads (connections come from an r2d2 pool).
pub struct RedisBackend {
    pool: Pool,
    /// Where the release watch gets its own connection (`None` with the application's pool,
    /// whose waiters poll).
    watch: Option<WatchSource>,
    keys: Keys,
    cleanup_in_is_locked: bool,
    /// `min_replicas`: the acknowledgements each acquisition waits for.
    replicas: Option<ReplicaAcks>,
    /// Where the server is and what messages must not show.
    server: Arc<Server>,
    display_url: String,
    /// The most keys one listing asks `SCAN` to examine.
    list_scan_budget: usize,
}

/// Where the release watch connects.
enum WatchSource {
    Server(Box<redis::Client>, Timeouts),
    Sentinel(Arc<SentinelPrimary>, Arc<Server>, Timeouts),
    Cluster(Vec<redis::Client>, Timeouts),
}

impl WatchSource {
    fn opener(&self) -> Opener {
        fn open(client: &redis::Client, t: Timeouts) -> redis::RedisResult<redis::Connection> {
            let connection = client.get_connection_with_timeout(t.connect)?;
            connection.set_write_timeout(Some(t.write))?;
            Ok(connection)
        }
        match self {
            WatchSource::Server(client, t) => {
                let (client, t) = (client.as_ref().clone(), *t);
                Box::new(move || open(&client, t))
            }
            WatchSource::Sentinel(primary, server, t) => {
                let (primary, server, t) = (Arc::clone(primary), Arc::clone(server), *t);
                Box::new(move || {
                    let (client, _) = primary.client(&server).map_err(|e| {
                        redis::RedisError::from(std::io::Error::other(e.message().to_owned()))
                    })?;
                    open(&client, t)
                })
            }
            WatchSource::Cluster(clients, t) => {
                // One node after another: any node hears every PUBLISH of the Cluster.
                let (clients, t) = (clients.clone(), *t);
                let mut next = 0;
                Box::new(move || {
                    let client = &clients[next % clients.len()];
                    next += 1;
                    open(client, t)
                })
            }
        }
    }
}

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
    cleanup_in_is_locked: bool,
    pool_size: u32,
    timeouts: Timeouts,
    tls_ca_file: Option<std::path::PathBuf>,
    list_scan_budget: usize,
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
            cleanup_in_is_locked: false,
            pool_size: 8,
            timeouts: Timeouts {
                connect: Duration::from_secs(2),
                read: Duration::from_secs(2),
                write: Duration::from_secs(2),
                checkout: Duration::from_secs(3),
            },
            tls_ca_file: None,
            list_scan_budget: DEFAULT_LIST_SCAN_BUDGET,
        }
    }
}

impl RedisBuilder {
    /// Where Redis is:
    /// - one server: `redis://[user:password@]host[:port][/db]`, `rediss://…` (TLS, verified
    ///   against the system's root certificates and any [`tls_ca_file`](Self::tls_ca_file); see
    ///   [TLS](self#tls)) or `redis+unix:///path/to/socket[?db=N]`;
    /// - a Cluster: `redis-cluster://[user:password@]h1:p1,h2:p2[/]` (`rediss-cluster://` with
    ///   TLS), any reachable nodes of it (see [Cluster](self#cluster));
    /// - a primary behind Sentinels: `redis-sentinel://[user:password@]s1:p1,s2:p2/NAME[/db]`
    ///   (`rediss-sentinel://`: TLS to the Sentinels and the primary; the credentials are the
    ///   primary's, `?sentinel_user=&sentinel_password=` the Sentinels' own; see
    ///   [Sentinel](self#sentinel)).
    ///
    /// Parameters: `?prefix=NAME` (the key prefix), `?layout=typescript|cluster` (see
    /// [`KeyLayout`]), `?min_replicas=N&replica_timeout=D` (see [`min_replicas`](Self::min_replicas);
    /// `D` as `500ms`, `2s` or milliseconds), `?tls_ca_file=PATH` (TLS only) adds a CA file;
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
    /// [Failover](self#failover) for exactly what it does and does not guarantee. Default: no
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

    /// The most keys one listing ([`LockBackend::list`](crate::LockBackend::list)) asks `SCAN`
    /// to examine, in all (the sum of its `COUNT`s, across a Cluster's primaries; default
    /// [`DEFAULT_LIST_SCAN_BUDGET`], at least 1). A listing that runs out says so
    /// ([`Coverage::WorkBoundReached`](crate::Coverage::WorkBoundReached)); see
    /// [Listing](self#listing).
    pub fn list_scan_budget(mut self, keys: usize) -> Self {
        self.list_scan_budget = keys.max(1);
        self
    }

    crate::net::pooled_builder_options!();

    /// Timeout for reading a reply (default 2 s).
    pub fn read_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.read = timeout;
        self
    }

    /// Timeout for sending a request (default 2 s).
    pub fn write_timeout(mut self, timeout: Duration) -> Self {
        self.timeouts.write = timeout;
        self
    }

    /// Validates the options (`InvalidArgument`, before any I/O) and, for a URL, opens one
    /// connection to check the servers and the credentials (`ServiceUnavailable`,
    /// `AuthFailed`, `NetworkTimeout` otherwise, with a message naming the server's
    /// `host:port` and the cause): for a Cluster, one node and its slot map; behind Sentinels,
    /// the primary they name.
    pub fn build(self) -> Result<RedisBackend> {
        let source = pool_source(
            "Redis",
            self.url,
            self.pool,
            &[
                ("connect_timeout", self.timeouts.connect),
                ("read_timeout", self.timeouts.read),
                ("write_timeout", self.timeouts.write),
                ("pool_timeout", self.timeouts.checkout),
            ],
            self.pool_size,
        )?;
        let key_prefix = match &self.key_prefix {
            Some(prefix) => Some(validate_prefix(prefix, "key_prefix")?),
            None => None,
        };
        let timeouts = self.timeouts;
        // Everything is checked before any I/O; the builder's options win over the URL's.
        let (source, parsed) = match source {
            Source::Pool(_) if self.tls_ca_file.is_some() => {
                return Err(LockError::invalid_argument(
                    "tls_ca_file applies to connections syncguard opens from a URL; the \
                     application's pool has TLS settings of its own",
                ));
            }
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

        let (pool, watch, server, display_url) = match (source, parsed) {
            (Some(pool), _) => (
                Pool::External(pool, timeouts),
                None,
                Arc::new(Server::application_pool(timeouts)),
                "<application pool>".to_owned(),
            ),
            (None, Some(parsed)) => {
                let ca_file = self.tls_ca_file.as_deref().or(parsed.ca_file.as_deref());
                let (pool, watch, server) = connect(&parsed, ca_file, timeouts, self.pool_size)?;
                (pool, Some(watch), server, parsed.display)
            }
            (None, None) => {
                return Err(LockError::internal("a Redis backend without a source"));
            }
        };
        Ok(RedisBackend {
            pool,
            watch,
            keys,
            cleanup_in_is_locked: self.cleanup_in_is_locked,
            replicas,
            server,
            display_url,
            list_scan_budget: self.list_scan_budget,
        })
    }
}

/// Opens syncguard's own pool for a parsed URL, after checking one connection.
fn connect(
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

/// Checks a key prefix (given as `option`, for messages) and returns it without its trailing
/// `:`. Never empty: keys without a namespace would mix with everything else in the database.
fn validate_prefix(prefix: &str, option: &str) -> Result<String> {
    let prefix = prefix.strip_suffix(':').unwrap_or(prefix);
    if prefix.trim().is_empty() {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} is empty: leave it out for the default `{DEFAULT_PREFIX}`, or \
             give a namespace such as `myapp`"
        )));
    }
    // Index keys (`prefix:id:` + 22 characters) must fit unhashed: scripts rebuild them.
    let longest_index = prefix.len() + 1 + "id:".len() + LOCK_ID_LENGTH;
    if longest_index + STORAGE_KEY_RESERVE > STORAGE_KEY_LIMIT {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} of {} bytes is too long: at most {} bytes",
            prefix.len(),
            STORAGE_KEY_LIMIT - STORAGE_KEY_RESERVE - 1 - "id:".len() - LOCK_ID_LENGTH
        )));
    }
    let last_segment = prefix.rsplit(':').next().unwrap_or(prefix);
    if RESERVED_SEGMENTS.contains(&last_segment) {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} may not end in an `id` or `fence` segment (got {prefix:?}): \
             its locks would overlap another prefix's index or fence keys"
        )));
    }
    if prefix.chars().any(char::is_control) {
        return Err(LockError::invalid_argument(format!(
            "the Redis {option} may not contain control characters"
        )));
    }
    Ok(prefix.to_owned())
}

/// A lock record as stored (and as the TypeScript SyncGuard stores it).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StoredLock {
    lock_id: String,
    expires_at_ms: f64,
    acquired_at_ms: f64,
    key: String,
    fence: String,
    /// Ours when a string; anything else under that name (another writer's idea of a holder)
    /// is tolerated, as every field the record does not define is, and read as none.
    #[serde(default)]
    holder: Option<serde_json::Value>,
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

    /// The key prefix in use (without trailing `:`).
    pub fn key_prefix(&self) -> &str {
        self.keys.prefix()
    }

    /// The key layout in use.
    pub fn layout(&self) -> KeyLayout {
        self.keys.layout()
    }

    /// The Redis key holding the lock on `key` (for inspection and tests).
    pub fn lock_key(&self, key: &str) -> Result<String> {
        Ok(self.keys.lock_keys(Key::new(key)?.as_str())?.lock)
    }

    /// The Redis key of the reverse index entry of `lock_id`.
    pub fn index_key(&self, lock_id: &str) -> Result<String> {
        Ok(self.keys.index_key(&LockId::new(lock_id)?))
    }

    /// The Redis key of the fence counter of `key`.
    pub fn fence_key(&self, key: &str) -> Result<String> {
        Ok(self.keys.lock_keys(Key::new(key)?.as_str())?.fence)
    }

    fn run(
        &self,
        call: impl FnMut(&mut dyn redis::ConnectionLike) -> redis::RedisResult<redis::Value>,
    ) -> Result<Reply> {
        Reply::parse(self.pool.run(&self.server, call)?)
    }

    fn foreign(&self, key: Option<&str>) -> LockError {
        let error = LockError::internal(
            "a Redis key syncguard uses holds a value that is not a SyncGuard lock record",
        );
        match key {
            Some(key) => error.with_key(key),
            None => error,
        }
    }

    /// The error for a script that refused what it found, before writing anything: a key
    /// holding no SyncGuard record (`{FOREIGN, key, why}`), a fence counter that is no
    /// counter (`{BAD_COUNTER, key, why}`) or that reached the limit (`{FENCE_OVERFLOW, key}`).
    /// Always `Internal`, naming the Redis key; `key` is the user key, where known.
    fn refusal(&self, reply: &mut Reply, key: Option<&Key>) -> LockError {
        let redis_key = reply.string().unwrap_or_default();
        let why = reply.string().unwrap_or_default();
        let at = self.server.location();
        let error = LockError::internal(match reply.status {
            Status::FenceOverflow => format!(
                "the fence counter {redis_key:?} has reached {FENCE_MAX}, the largest fence \
                 (Redis {at}); nothing was written: rotate the key namespace (key_prefix)"
            ),
            Status::BadCounter => format!(
                "the fence counter {redis_key:?} holds no fence counter: {why} (Redis {at}); \
                 nothing was written: repair or remove it"
            ),
            _ => format!(
                "the Redis key {redis_key:?} holds no SyncGuard lock record: {why} (Redis \
                 {at}); syncguard never overwrites it: remove it, or use another key_prefix"
            ),
        });
        match key {
            Some(key) => error.with_key(key.as_str()),
            None => error,
        }
    }

    fn decode(&self, raw: &str) -> Result<LockRecord> {
        let stored: StoredLock = serde_json::from_str(raw).map_err(|_| self.foreign(None))?;
        let fence = stored
            .fence
            .parse::<Fence>()
            .map_err(|_| self.foreign(None))?;
        Ok(LockRecord {
            key: stored.key,
            lock_id: stored.lock_id,
            expires_at_ms: whole_ms(stored.expires_at_ms)?,
            acquired_at_ms: whole_ms(stored.acquired_at_ms)?,
            fence,
            holder: match stored.holder {
                Some(serde_json::Value::String(holder)) => Some(holder),
                _ => None,
            },
        })
    }

    /// What a release or extend reply says; `applied` reads what an applied one carries.
    fn outcome<T>(
        &self,
        reply: &mut Reply,
        lock_id: &LockId,
        applied: impl FnOnce(&mut Reply) -> Result<T>,
    ) -> Result<Outcome<T>> {
        match reply.status {
            Status::Ok => applied(reply).map(Outcome::Applied),
            Status::NotFound | Status::Absent => Ok(Outcome::NotFound),
            Status::Expired => Ok(Outcome::Expired),
            Status::Foreign | Status::FenceOverflow | Status::BadCounter => {
                Err(self.refusal(reply, None).with_lock_id(lock_id.as_str()))
            }
        }
    }

    /// What an extend script's raw reply says.
    fn extension(&self, value: redis::Value, lock_id: &LockId) -> Result<Outcome<Extension>> {
        self.outcome(&mut Reply::parse(value)?, lock_id, |reply| {
            Ok(Extension {
                expires_at_ms: reply.int()?,
                version: None,
            })
        })
    }
}

/// Timestamps come back from Lua's cjson as JSON numbers, possibly written as floats.
fn whole_ms(value: f64) -> Result<i64> {
    if value.is_finite() && value.fract() == 0.0 && value.abs() < 9.0e15 {
        Ok(value as i64)
    } else {
        Err(LockError::internal(
            "a stored lock timestamp is not a whole number of milliseconds",
        ))
    }
}

impl RedisBackend {
    /// Releases a lock granted on a Cluster whose index entry could not be written (the lock
    /// could not be found by its lock id), and says so; see `split`.
    fn undo_unindexed(&self, key: &Key, lock_id: &LockId, error: redis::RedisError) -> LockError {
        if let Err(undo) = self.release_lease(LeaseRef::new(lock_id).with_key(key)) {
            log::warn!(
                "syncguard: could not release the lock on {key:?} after its index entry could \
                 not be written; it expires with its TTL: {undo}"
            );
        }
        let error = errors::map_error(error, &self.server, errors::Phase::Call);
        LockError::new(
            if error.code().is_transient() {
                error.code()
            } else {
                ErrorCode::ServiceUnavailable
            },
            format!(
                "the lock was granted but its index entry (by which its lock id finds it) could \
                 not be written, so it was released again: {}",
                error.message()
            ),
        )
        .with_key(key.as_str())
    }

    /// Deletes the index entry of a lock id that holds no lock (best effort: it expires with
    /// its TTL anyway).
    fn drop_index_entry(&self, index_key: &str) {
        let deleted = self.pool.run(&self.server, |conn| {
            redis::cmd("DEL").arg(index_key).query::<i64>(conn)
        });
        if let Err(error) = deleted {
            log::warn!(
                "syncguard: could not delete the index entry of a refused acquisition; it \
                 expires with its TTL: {error}"
            );
        }
    }

    /// Releases a lock whose acquisition did not reach enough replicas, and says so.
    fn undo_unreplicated(
        &self,
        key: &Key,
        lock_id: &LockId,
        why: std::result::Result<i64, LockError>,
    ) -> LockError {
        if let Err(error) = self.release_lease(LeaseRef::new(lock_id).with_key(key)) {
            log::warn!(
                "syncguard: could not release the lock on {key:?} after too few replicas \
                 acknowledged it; it expires with its TTL: {error}"
            );
        }
        let Some(policy) = &self.replicas else {
            return LockError::internal("replica acknowledgements without min_replicas");
        };
        let error = match why {
            Ok(acknowledged) => LockError::new(
                ErrorCode::ServiceUnavailable,
                format!(
                    "only {acknowledged} of the {} replicas required (min_replicas) acknowledged \
                     the acquisition within {:?} (Redis {}); the lock was released so that its \
                     fence cannot be handed out again after a failover",
                    policy.replicas,
                    policy.timeout,
                    self.server.location()
                ),
            ),
            Err(error) => LockError::new(
                if error.code().is_transient() {
                    error.code()
                } else {
                    ErrorCode::ServiceUnavailable
                },
                format!(
                    "could not confirm that {} replicas (min_replicas) have the acquisition; the \
                     lock was released: {}",
                    policy.replicas,
                    error.message()
                ),
            ),
        };
        error.with_key(key.as_str())
    }

    /// Renews leases in one pipeline: one round trip on one server, one per node (all at once)
    /// on a Cluster. Every renewal is still its own atomic script (in the cluster layout, the
    /// record's script and a `PEXPIRE` of its index entry, so every lease here carries its key).
    fn extend_group(&self, leases: &[&(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        let split = self.keys.layout() == KeyLayout::Cluster;
        let script = if split {
            &SCRIPTS.extend_record
        } else {
            &SCRIPTS.extend
        };
        let mut pipe = redis::pipe();
        for (lease, ttl) in leases {
            let target = match (split, lease.key) {
                (false, _) => self.keys.index_key(lease.lock_id),
                (true, Some(key)) => match self.keys.lock_keys(key.as_str()) {
                    Ok(keys) => keys.lock,
                    Err(error) => {
                        return leases
                            .iter()
                            .map(|_| Err(LockError::new(error.code(), error.message())))
                            .collect();
                    }
                },
                (true, None) => {
                    return leases
                        .iter()
                        .map(|_| Err(LockError::internal("a batched renewal without its key")))
                        .collect();
                }
            };
            let mut invocation = script.prepare_invoke();
            invocation
                .key(target)
                .arg(lease.lock_id.as_str())
                .arg(TIME_TOLERANCE_MS)
                .arg(ttl.as_millis());
            pipe.invoke_script(&invocation);
            if split {
                pipe.add_command(self.index_pexpire(lease.lock_id, *ttl));
            }
        }
        let answers = self
            .pool
            .run_on(&self.server, |mut conn| conn.pipeline(&mut pipe, script));
        // Each lease sent `per_lease` commands, its script first: the answers are taken in
        // chunks of that size, so a lease can only ever read the answers of its own commands.
        let per_lease = if split { 2 } else { 1 };
        match answers {
            Ok(answers) if answers.len() == leases.len() * per_lease => {
                let mut unfollowed = Vec::new();
                let mut answers = answers.into_iter();
                let outcomes = leases
                    .iter()
                    .map(|(lease, _)| {
                        let mut own = answers.by_ref().take(per_lease);
                        let script = own.next();
                        // The index entry's PEXPIRE, in the cluster layout.
                        if let Some(Err(error)) = own.next() {
                            unfollowed.push(error);
                        }
                        match script {
                            Some(Ok(value)) => self.extension(value, lease.lock_id),
                            Some(Err(error)) => {
                                Err(errors::map_error(error, &self.server, errors::Phase::Call))
                            }
                            None => Err(LockError::internal("Redis answered a pipeline short")),
                        }
                    })
                    .collect();
                self.index_not_followed(None, "renewal", unfollowed);
                outcomes
            }
            Ok(_) => leases
                .iter()
                .map(|_| Err(LockError::internal("Redis answered a pipeline short")))
                .collect(),
            Err(error) => leases
                .iter()
                .map(|_| Err(LockError::new(error.code(), error.message())))
                .collect(),
        }
    }
}

impl Driver for RedisBackend {
    fn describe(&self) -> Capabilities {
        Capabilities::new("redis", true, TimeAuthority::Server)
    }

    fn try_acquire(&self, key: &Key, ttl: Ttl, holder: Option<&Holder>) -> Result<Acquisition> {
        let keys = self.keys.lock_keys(key.as_str())?;
        let lock_id = self.keys.new_lock_id();
        let index_key = self.keys.index_key(&lock_id);
        let slot = key_slot(keys.lock.as_bytes());
        let split = self.keys.layout() == KeyLayout::Cluster;
        let mut invocation = SCRIPTS.acquire.key(&keys.lock);
        invocation.key(&keys.fence);
        if !split {
            invocation.key(&index_key);
        }
        invocation
            .arg(lock_id.as_str())
            .arg(ttl.as_millis())
            .arg(TIME_TOLERANCE_MS)
            .arg(key.as_str())
            .arg(FENCE_MAX)
            .arg(holder.map_or("", Holder::as_str));
        let mut set_index = redis::cmd("SET");
        set_index
            .arg(&index_key)
            .arg(&keys.lock)
            .arg("PX")
            .arg(ttl.as_millis());
        // Whether the script may have run although no answer came back (a timeout, a
        // connection lost after the request went out): then the lock may be held under
        // `lock_id`, and the error says so (`in_doubt`), so that the Locker can release it.
        let unanswered = std::cell::Cell::new(false);
        let note = |error: redis::RedisError| {
            if error.code().is_none() {
                unanswered.set(true);
            }
            error
        };
        let answer = self.pool.run_on(&self.server, |mut conn| {
            let (value, index) = if split {
                let answers = split::script_with_index(
                    &mut conn,
                    &invocation,
                    &SCRIPTS.acquire,
                    set_index.clone(),
                )
                .map_err(note)?;
                (answers.script, answers.index)
            } else {
                (
                    invocation.invoke(conn.as_dyn()).map_err(note)?,
                    Ok(redis::Value::Okay),
                )
            };
            // WAIT counts the acknowledgements of this connection's writes, so it goes on the
            // same connection; its failure is an answer, not a reason to repeat the script.
            let acknowledged = match &self.replicas {
                Some(policy) if scripts::granted(&value) => Some(policy.wait(conn, slot)),
                _ => None,
            };
            Ok((value, index, acknowledged))
        });
        let (value, index, acknowledged) = answer.map_err(|error| {
            let error = error.with_key(key.as_str());
            if unanswered.get() {
                error.in_doubt(lock_id.as_str())
            } else {
                error
            }
        })?;
        let mut reply = Reply::parse(value)?;
        match reply.status {
            Status::Ok => {
                let fence: Fence = reply.string()?.parse()?;
                // Re-issuing through from_counter applies the warning threshold.
                let fence =
                    Fence::from_counter(fence.value()).map_err(|e| e.with_key(key.as_str()))?;
                let expires_at_ms = reply.int()?;
                if let Err(error) = index {
                    return Err(self.undo_unindexed(key, &lock_id, error));
                }
                if let (Some(policy), Some(acknowledged)) = (&self.replicas, acknowledged) {
                    let acknowledged = acknowledged
                        .map_err(|e| errors::map_error(e, &self.server, errors::Phase::Call));
                    if !matches!(acknowledged, Ok(n) if n >= i64::from(policy.replicas)) {
                        return Err(self.undo_unreplicated(key, &lock_id, acknowledged));
                    }
                }
                Ok(Acquisition::granted(
                    lock_id.into_string(),
                    fence,
                    expires_at_ms,
                    None,
                ))
            }
            Status::Absent => Ok(Acquisition::Locked),
            Status::FenceOverflow | Status::BadCounter | Status::Foreign => {
                let error = self.refusal(&mut reply, Some(key));
                if split && index.is_ok() {
                    // The index entry went out beside the script (one round trip) and points
                    // at no lock of this lock id: a refusal leaves nothing behind.
                    self.drop_index_entry(&index_key);
                }
                Err(error)
            }
            Status::NotFound | Status::Expired => Err(self.foreign(Some(key.as_str()))),
        }
    }

    fn release_lease(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        if self.keys.layout() == KeyLayout::Cluster {
            return self.release_split(lease);
        }
        let index_key = self.keys.index_key(lease.lock_id);
        let mut reply = self.run(|conn| {
            SCRIPTS
                .release
                .key(&index_key)
                .arg(lease.lock_id.as_str())
                .arg(TIME_TOLERANCE_MS)
                .invoke(conn)
        })?;
        self.outcome(&mut reply, lease.lock_id, |_| Ok(()))
    }

    fn extend_lease(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        if self.keys.layout() == KeyLayout::Cluster {
            return self.extend_split(lease, ttl);
        }
        let index_key = self.keys.index_key(lease.lock_id);
        let value = self.pool.run(&self.server, |conn| {
            SCRIPTS
                .extend
                .key(&index_key)
                .arg(lease.lock_id.as_str())
                .arg(TIME_TOLERANCE_MS)
                .arg(ttl.as_millis())
                .invoke(conn)
        })?;
        self.extension(value, lease.lock_id)
    }

    fn key_is_locked(&self, key: &Key) -> Result<bool> {
        let lock_key = self.keys.lock_keys(key.as_str())?.lock;
        let cleanup = if self.cleanup_in_is_locked { "1" } else { "0" };
        let index_head = self.keys.cleanup_index_head();
        let mut reply = self.run(|conn| {
            SCRIPTS
                .is_locked
                .key(&lock_key)
                .arg(TIME_TOLERANCE_MS)
                .arg(cleanup)
                .arg(&index_head)
                .arg(CLEANUP_GUARD_MS)
                .invoke(conn)
        })?;
        match reply.status {
            Status::Ok => Ok(true),
            Status::Foreign => Err(self.refusal(&mut reply, Some(key))),
            _ => Ok(false),
        }
    }

    fn extend_leases(&self, leases: &[(LeaseRef<'_>, Ttl)]) -> Vec<Result<Outcome<Extension>>> {
        // One pipeline for all, except (in the cluster layout) the leases known only by their
        // lock id, whose record is found through their index entry first.
        let (group, alone): (Vec<usize>, Vec<usize>) = (0..leases.len()).partition(|&i| {
            self.keys.layout() == KeyLayout::TypeScript || leases[i].0.key.is_some()
        });
        let mut answers: Vec<Option<Result<Outcome<Extension>>>> =
            leases.iter().map(|_| None).collect();
        if !group.is_empty() {
            let members: Vec<_> = group.iter().map(|&i| &leases[i]).collect();
            for (&i, answer) in group.iter().zip(self.extend_group(&members)) {
                answers[i] = Some(answer);
            }
        }
        for i in alone {
            let (lease, ttl) = &leases[i];
            answers[i] = Some(self.extend_lease(*lease, *ttl));
        }
        answers
            .into_iter()
            .map(|answer| {
                answer.unwrap_or_else(|| Err(LockError::internal("a renewal got no answer")))
            })
            .collect()
    }

    fn watch_releases(&self, on_release: OnRelease) -> Result<Option<Box<dyn ReleaseWatch>>> {
        let Some(source) = &self.watch else {
            return Ok(None);
        };
        let watch =
            RedisWatch::start(source.opener(), self.keys.prefix(), on_release).map_err(|e| {
                LockError::new(
                    ErrorCode::ServiceUnavailable,
                    format!("could not start the Redis release watch: {e}"),
                )
            })?;
        Ok(Some(Box::new(watch)))
    }

    fn find(&self, by: Find<'_>) -> Result<Option<LockRecord>> {
        let mut reply = match by {
            Find::Key(key) => {
                let lock_key = self.keys.lock_keys(key.as_str())?.lock;
                let mut reply = self.run(|conn| {
                    SCRIPTS
                        .lookup_key
                        .key(&lock_key)
                        .arg(TIME_TOLERANCE_MS)
                        .invoke(conn)
                })?;
                if reply.status == Status::Foreign {
                    return Err(self.refusal(&mut reply, Some(key)));
                }
                reply
            }
            Find::LockId(lock_id) if self.keys.layout() == KeyLayout::Cluster => {
                return self.find_split(lock_id);
            }
            Find::LockId(lock_id) => {
                let index_key = self.keys.index_key(lock_id);
                let mut reply = self.run(|conn| {
                    SCRIPTS
                        .lookup_id
                        .key(&index_key)
                        .arg(lock_id.as_str())
                        .arg(TIME_TOLERANCE_MS)
                        .invoke(conn)
                })?;
                if reply.status == Status::Foreign {
                    return Err(self
                        .refusal(&mut reply, None)
                        .with_lock_id(lock_id.as_str()));
                }
                reply
            }
        };
        if reply.status != Status::Ok {
            return Ok(None);
        }
        let raw = reply.string()?;
        self.decode(&raw).map(Some)
    }

    fn list_records(&self, prefix: &KeyPrefix, limit: ListLimit) -> Result<LockList<LockRecord>> {
        self.list(prefix, limit)
    }
}

impl fmt::Debug for RedisBackend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.pool.state();
        f.debug_struct("RedisBackend")
            .field("url", &self.display_url)
            .field("key_prefix", &self.keys.prefix())
            .field("layout", &self.keys.layout())
            .field("min_replicas", &self.replicas.map(|r| r.replicas))
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("pool_size", &self.pool.max_size())
            .field("connections", &state.connections)
            .field("idle_connections", &state.idle_connections)
            .finish()
    }
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
            .field("cleanup_in_is_locked", &self.cleanup_in_is_locked)
            .field("pool_size", &self.pool_size)
            .field("timeouts", &self.timeouts)
            .field("tls_ca_file", &self.tls_ca_file)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes() {
        let check = |prefix: &str| validate_prefix(prefix, "key_prefix");
        assert_eq!(check("syncguard").unwrap(), "syncguard");
        assert_eq!(check("app:").unwrap(), "app");
        assert!(check(&"p".repeat(948)).is_ok());
        assert!(check(&"p".repeat(949)).is_err());
        for overlapping in ["id", "fence", "app:id", "app:fence", "app:fence:"] {
            assert!(check(overlapping).is_err(), "{overlapping}");
        }
        assert!(check("app:fences").is_ok());
        assert!(check("a\nb").is_err());
        for empty in ["", ":", " "] {
            assert!(check(empty).is_err(), "{empty:?}");
        }
    }

    #[test]
    fn index_keys_are_what_make_storage_key_gives() {
        for prefix in ["syncguard", "p", &"p".repeat(948)] {
            let id = crate::driver::generate_lock_id();
            let expected = make_storage_key(
                prefix,
                &format!("id:{id}"),
                STORAGE_KEY_LIMIT,
                STORAGE_KEY_RESERVE,
            )
            .unwrap();
            assert_eq!(format!("{prefix}:id:{id}"), expected);
        }
    }

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
                 prefix, tls_ca_file, layout, min_replicas, replica_timeout, protocol",
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
                 prefix, tls_ca_file, layout, min_replicas, replica_timeout, protocol, db, user, \
                 pass",
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
                 tls_ca_file, layout, min_replicas, replica_timeout, protocol",
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

    #[test]
    fn whole_ms_rejects_fractions() {
        assert_eq!(whole_ms(1.7e12).unwrap(), 1_700_000_000_000);
        assert!(whole_ms(1.5).is_err());
        assert!(whole_ms(f64::NAN).is_err());
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
