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
//! # Semaphores
//!
//! A semaphore ([`LockBackend::acquire_as`](crate::LockBackend::acquire_as) with
//! [`Mode::Permit`](crate::Mode::Permit)) is stored apart
//! from the key's lock, under three keys of its own, the same in both layouts
//! ([`SemaphoreKeys`], [`RedisBackend::semaphore_keys`]). With `T` the cluster layout's tag of
//! the user key `K` (see [`KeyLayout`]: `K` itself, or the 22-character hash `msk` uses for
//! long keys and keys with braces):
//!
//! | Redis key | type | content | TTL |
//! |---|---|---|---|
//! | `P{T}:sem:holders` | sorted set | each held permit's lock id, scored by its `expiresAtMs` | the last permit's expiry + 1 s tolerance + 10 s |
//! | `P{T}:sem:permits` | hash | lock id → JSON `{"lockId","expiresAtMs","acquiredAtMs","key","fence"[,"holder"]}` | the same |
//! | `P{T}:sem:fence` | string | the semaphore's own fence counter (`INCR`) | none: never expires, never deleted |
//!
//! Why `P{T}:…` and not `P:sem:K`: every lock record, index entry and fence counter of the
//! prefix `P` starts with `P:`, in either layout — and in the TypeScript layout `P:sem:K` *is*
//! the lock record of the user key `sem:K`. A name that starts with `P{` is none of them
//! (and ends in `:holders`, `:permits` or `:fence`, where every cluster-layout key ends in
//! `}`). The tag puts the three keys in one hash slot, so each operation is one script, on a
//! single server, behind Sentinel and on a Cluster alike. As for locks under prefixes such as
//! `a` and `a:b`, prefixes that are each other's beginning can still name each other's keys.
//!
//! So a semaphore of one permit on `"k"` is **not** the lock on `"k"`: each admits its own
//! holder, with fences of its own sequence. The TypeScript SyncGuard has no semaphores; it
//! neither reads nor writes these keys.
//!
//! | operation | requests |
//! |---|---|
//! | acquire | 1 script: reclaim (`ZRANGEBYSCORE`, `HDEL`, `ZREMRANGEBYSCORE` of permits past expiry + tolerance), `ZCARD` against this caller's N, `INCR` of the counter, `HSET` + `ZADD`; then `WAIT` with `min_replicas`, as for locks |
//! | release, extend | 1 script on the permit's lock id (`HGET`, then `HDEL` + `ZREM`, or a new record and score); an expired permit is removed and answered expired, never revived |
//! | holders | 1 read-only script: the live lock ids by score, their records |
//! | listing by prefix ([`LockBackend::list`](crate::LockBackend::list), [`LeaseKind::Permit`](crate::LeaseKind::Permit)) | a walk of the keyspace, as for locks: see [Listing](#listing) |
//! | batch renewal (heartbeat) | the permits' scripts in 1 pipeline (1 per node on a Cluster), beside the locks' pipeline |
//!
//! A permit's release (and an expired one's removal) is announced as a lock's: the user key,
//! `PUBLISH`ed on the lock's channel `<lock key>:released`, so waiters wake at once. What
//! the scripts find is checked first, as for locks: a key of another Redis type, a record that
//! is not of the lock record's shape, or a counter that is no counter → `Internal`, naming the
//! key, nothing written.
//!
//! # The line
//!
//! A waiter that finds a key held takes a place in the key's line
//! ([`Line`](crate::driver::Line)); the lock's line and the semaphore's are two lines, each
//! three keys of its own, the same in both layouts, in the hash slot of the lock's and the
//! semaphore's keys ([`LineKeys`], [`RedisBackend::line_keys`]):
//!
//! | Redis key (the semaphore's: `P{T}:sem:line:…`) | type | content | TTL |
//! |---|---|---|---|
//! | `P{T}:line:order` | sorted set | each place's id, scored by its ticket | 7 s after the line's last write |
//! | `P{T}:line:expiry` | sorted set | each place's id, scored by its expiry (Redis `TIME` + [`PLACE_TTL`](crate::driver::PLACE_TTL)) | the same |
//! | `P{T}:line:places` | hash | place id → holder text (empty: none); `ticket` → the last ticket issued | the same |
//!
//! The acquire scripts (lock and permit) decide the grant by the line and write the place in
//! the same call; with no one in line that costs one read (`TYPE`) inside the script and no
//! write. Leaving the line is one script, reading it one read-only script. With `min_replicas`
//! only a granted acquisition is `WAIT`ed for: a place is not. The TypeScript SyncGuard knows
//! no line: its acquisitions pass it.
//!
//! A refused waiter is told its place
//! ([`Acquisitions::Locked`](crate::driver::Acquisitions::Locked)'s `position`) by the same
//! script: once its place is written and the expired ones pruned, the `ZRANK` of its place in
//! the order (ticket, then place id) is the number of live places ahead of it; for a set, the
//! most over its keys' lines (on a Cluster over several slots, as the last line script of each
//! key left them). One more command inside the script, no round trip.
//!
//! # Several keys
//!
//! [`Driver::try_acquire`](crate::driver::Driver::try_acquire) of a set is one script over every
//! key's keys on one server and behind Sentinel (all or none at one instant: no other client
//! sees part of the set held), and on a Cluster when every key's lock lies in one hash slot; on
//! a Cluster whose keys lie in several slots, the keys are taken one at a time in the set's
//! order and those taken are released on a refusal (all or none as the caller sees it, the
//! earlier keys briefly held in between). A key of a set is decided and written as a key alone.
//! A set sent and not answered is in doubt for every key.
//!
//! # Shared holders
//!
//! A shared hold of a lock (a reader:
//! [`LockBackend::acquire_as`](crate::LockBackend::acquire_as) with
//! [`Mode::Shared`](crate::Mode::Shared)) is a lease of
//! its own, stored beside the lock under two keys, the same in both layouts, in the hash slot of
//! the lock's line ([`SharedKeys`], [`RedisBackend::shared_keys`]):
//!
//! | Redis key | type | content | TTL |
//! |---|---|---|---|
//! | `P{T}:shared:holders` | sorted set | each reader's lock id, scored by its own `expiresAtMs` | the last reader's expiry + 1 s tolerance + 10 s |
//! | `P{T}:shared:records` | hash | lock id → JSON `{"lockId","expiresAtMs","acquiredAtMs","key","fence"[,"holder"]}` | the same |
//!
//! A reader's fence comes from the lock's own counter, so fences order every grant of the key;
//! its place in line, when it waits, is in the lock's line, marked shared (`shared:<place id>`
//! → `1` in `P{T}:line:places`). Each reader expires on its own score: the keys' TTL only
//! clears an abandoned set, and an expired reader never counts (every count is by score, past
//! the tolerance), whatever the others do; the next reader's grant reclaims it.
//!
//! | operation | requests |
//! |---|---|
//! | shared acquire | 1 script: the reader's own record (a repeat is the same hold), the lock record (a live exclusive lock refuses), the line (no live exclusive place ahead), `INCR` of the lock's counter, reclaim of expired readers, `HSET` + `ZADD`; then `WAIT` with `min_replicas`, as for locks |
//! | exclusive acquire | the same one script as before, plus `TYPE` and `ZCOUNT` of the readers' expiries (read only): a live reader refuses it as a live record does |
//! | release, extend, readers | the semaphore's scripts on these two keys (see [Semaphores](#semaphores)); a release is announced on the lock's channel |
//! | listing by prefix ([`LockBackend::list`](crate::LockBackend::list), [`LeaseKind::Shared`](crate::LeaseKind::Shared)) | a walk of the keyspace, as for permits: see [Listing](#listing) |
//! | batch renewal (heartbeat) | the readers' scripts in 1 pipeline (1 per node on a Cluster) |
//!
//! No fixed limit on readers per key (tested with 1 000): the sorted set and hash grow with
//! them; reading the readers returns them all in one reply.
//!
//! **The TypeScript SyncGuard sees exclusive records only**: its acquire script neither reads
//! nor writes these keys, so a TypeScript client takes the exclusive lock while Rust readers
//! hold the key shared. Share keys with TypeScript clients in exclusive mode only.
//!
//! # Breaking and proclaiming
//!
//! An operator's break ([`Driver::break_leases`](crate::driver::Driver::break_leases)) is one
//! script on the key's slot: it removes the live holders of the kind asked (or the one lock id
//! named), never a marker of an earlier break, and writes a marker in the place of each, an
//! ordinary record with the key's next fence (`INCR` of the lock's counter, or the
//! semaphore's), the operator's note as its holder text and its expiry from Redis `TIME`; then
//! it publishes on the lock's release channel, as a release does.
//!
//! | break | requests |
//! |---|---|
//! | a lock, TypeScript layout | 1 script: the record, the broken holder's index entry deleted, the marker's record and index entry written with `PX`, exactly as a TypeScript acquisition writes them |
//! | a lock, cluster layout | 1 script on the record and counter; then 1 pipeline [`DEL` the broken holder's `I`, `SET` the marker's `I`], whose failure is logged (the break stands, as a release's does) |
//! | shared holders, permits | 1 script on the holder set and its counter; with more holders than the marker lock ids drawn (8 at first), it writes nothing and asks for more, and is sent again |
//!
//! A break sent again after its connection dropped finds its own markers and fails without
//! breaking anything more (`ServiceUnavailable`, the markers hold the key).
//!
//! A renewal that replaces a lock's holder text (a leader's proclaim:
//! [`LeaseRef::with_holder`](crate::driver::LeaseRef::with_holder)) has scripts of its own,
//! `proclaim.lua` and `proclaim_record.lua`, sent as the renewal's would be; the heartbeat's
//! renewal scripts are the ones they were, and a batch that holds a proclaim sends it apart.
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
//! states; a guard, which knows its key, never reads the index. The rules, exactly, are in
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
//! [`DEFAULT_LIST_SCAN_BUDGET`]; the URL's `?list_scan_budget=N` otherwise); a listing that runs
//! out answers what it found, with
//! [`Coverage::WorkBoundReached`](crate::Coverage::WorkBoundReached). `MATCH` filters only what
//! `SCAN` has examined, so every key of the database counts against the budget, under the
//! listing's prefix or not: on a server shared with other data, raise the budget above the
//! number of keys in the database, or keep the locks in a database of their own.
//!
//! [`LockBackend::list`](crate::LockBackend::list) of permits walks the same way, for the
//! semaphores' permits hashes: `SCAN` `MATCH P{*}:sem:permits` — every semaphore of the key
//! prefix, since a user key under the listing's prefix may be stored under its hash (a long key,
//! a key with braces), so the user-key prefix cannot narrow the pattern; only names whose tag is
//! the key under the prefix or a hash are read — then pipelined `HGETALL`s with `TIME`. What it
//! costs: the same scan budget (at most [`RedisBuilder::list_scan_budget`] keys examined, every
//! key of the database counting, not only semaphores), plus one `HGETALL` per semaphore read,
//! whose answer is every permit of it, expired ones not yet reclaimed included. A permit is
//! listed when it is a SyncGuard record filed under its own lock id in its own key's hash,
//! under the prefix, and live by Redis `TIME` (its `expiresAtMs` later than `TIME` less the
//! tolerance, as the holders script decides); what is not — a field that is no record, a key
//! of another type — is skipped, as for locks.
//! Lock records are never among the permits, nor permits among the locks.
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
//! primary of the lock's slot, and then on the primary of its index entry's slot, which holds
//! the way to the lock by its lock id; a permit has no index entry). With fewer than `N`
//! acknowledgements within `D` on either, the lock is released again and the acquisition fails
//! with `ServiceUnavailable` (transient). So every lock and fence a caller is handed (and on a
//! Cluster, its index entry) is on at least `N` replicas. What that does guarantee:
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
//! **What is stored is checked by one rule, in every operation** (the scripts' `record.lua`):
//! a lock record is a JSON object with a 22-character base64url `lockId`, whole-millisecond
//! `expiresAtMs` and `acquiredAtMs` in `0..9e15`, a non-empty `key` and a 15-digit `fence`
//! other than zero; further fields are kept. Anything else under a lock key (another shape,
//! a malformed field, `Infinity`, text that is not JSON, a hash — `WRONGTYPE`), a fence counter
//! that is not a non-negative integer, or one at [`FENCE_MAX`](crate::driver::FENCE_MAX) → `Internal`, naming the
//! Redis key and what is wrong, before anything is written (in the cluster layout, the index
//! entry sent beside a refused acquisition is deleted again).
//!
//! An acquisition whose script was sent but got no answer (a timeout, a connection lost after
//! the request went out) fails marked [in doubt](crate::LockError::in_doubt), with the lock id it was
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

// This file is the driver: each operation, deciding on the key layout at most once. Beside
// it: `builder.rs` (the options, `build()`), `config.rs` (what a URL says, timeouts; `hosts.rs`
// for multi-host URLs), `client.rs` (clients, TLS roots), `pool.rs` (syncguard's pool and
// checkout), `cluster.rs` and `node.rs` (Cluster connections), `sentinel.rs` (finding the
// primary), `errors.rs`, `layout.rs` (key names), `store.rs` (what every operation works
// with; replies read), `typescript.rs` and `split.rs` (each layout's own operations),
// `scripts.rs` (the Lua scripts), `semaphore.rs` (semaphores' operations), `replicas.rs`
// (`min_replicas`), `watch.rs` (release notifications), `list.rs` (listing), `slot.rs` (hash
// slots).
mod acquire_args;
mod breaking;
mod builder;
mod client;
mod cluster;
mod config;
mod driver;
mod errors;
mod hosts;
mod layout;
mod line;
mod list;
mod multi;
mod node;
mod pool;
mod replicas;
mod scripts;
mod semaphore;
mod sentinel;
mod shared;
mod slot;
mod slots_set;
mod split;
mod store;
mod typescript;
mod watch;

pub use self::builder::RedisBuilder;
pub use self::driver::{CLEANUP_GUARD_MS, RedisBackend};
pub use self::layout::{
    DEFAULT_PREFIX, KeyLayout, LineKeys, STORAGE_KEY_LIMIT, STORAGE_KEY_RESERVE, SemaphoreKeys,
    SharedKeys,
};
pub use self::list::DEFAULT_LIST_SCAN_BUDGET;
