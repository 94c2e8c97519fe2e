//! Listing the locks under a key prefix ([`Driver::list_records`](crate::driver::Driver::list_records))
//! of every kind ([`LeaseKind`]: the locks, the permits of the semaphores, the shared
//! holders): `SCAN` over
//! the lock records (or the semaphores' permits hashes), read in batches, with a bound on the
//! work.
//!
//! Redis has no index by user key, so a listing walks the keyspace: `SCAN` with a `MATCH`
//! pattern as narrow as the layout allows and a bounded `COUNT`, on the server (Sentinel: the
//! primary it names) or on every primary of a Cluster, one after another. The names it returns
//! are filtered (a record's name carries its user key, or the 22-character hash that replaces
//! a long key or, in the cluster layout, a key with braces), then read in batches of `GET`s
//! pipelined with `TIME`, the clock that decides liveness. What is read must be a SyncGuard
//! lock record (the decoding every operation uses), stored under the very name its `key`
//! field gives, under the prefix, and live; anything else — an index entry or a fence counter
//! (in the TypeScript layout their names can look like records'), another application's value,
//! a key of another type — is skipped. Hashed keys are found by their record's `key` field.
//!
//! Permits are listed the same way, from the semaphores' permits hashes (`P{T}:sem:permits`,
//! the same in both layouts): `SCAN` `MATCH`es all of them under the key prefix `P` — a user
//! key under the listing's prefix may be stored under its hash (a long key, or any key with a
//! brace), so the prefix cannot narrow the pattern — names whose tag neither starts with the
//! prefix nor is a hash are not read, and the rest are read with pipelined `HGETALL`s and
//! `TIME`. A permit is listed when its field holds a SyncGuard record of its own lock id, whose
//! `key` names this very hash, under the prefix, and live; anything else — an expired permit
//! not yet reclaimed, a field that is no record, a key of another type — is skipped, as for
//! locks. Lock records, index entries and fence counters (`P:…`) never match. The shared
//! holders of the locks under a prefix ([`LeaseKind::Shared`]) are listed as permits are, from their records hashes (`P{T}:shared:records`).
//!
//! The work bound, for either listing: one listing asks `SCAN` to examine at most
//! [`list_scan_budget`](super::RedisBuilder::list_scan_budget) keys in all (the sum of its
//! `COUNT`s, across nodes; default [`DEFAULT_LIST_SCAN_BUDGET`], or the URL's
//! `?list_scan_budget=`). `MATCH` filters what `SCAN` examined, so every key of the database
//! counts, under the prefix or not. When the budget runs out before the walk is over, the list
//! holds what was found and says so
//! ([`Coverage::WorkBoundReached`](crate::driver::Coverage::WorkBoundReached)).

use std::collections::HashSet;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{Cmd, ConnectionLike, FromRedisValue, RedisError, RedisResult, Value};

use super::layout::Keys;
use super::layout::{KeyLayout, STORAGE_KEY_LIMIT, STORAGE_KEY_RESERVE};
use super::node::{self, ClusterConnection};
use super::pool::Conn;
use super::store::Store;
use crate::driver::{
    KeyPrefix, LeaseKind, ListLimit, LockList, LockRecord, MAX_KEY_LENGTH_BYTES, TIME_TOLERANCE_MS,
    is_live, validate_lock_id,
};
use crate::error::Result;

/// How many keys one listing asks `SCAN` to examine by default, in all.
pub const DEFAULT_LIST_SCAN_BUDGET: usize = 100_000;

/// The `COUNT` of one `SCAN` call: the keys it examines, roughly.
const SCAN_COUNT: usize = 1000;

/// The length of a hashed tag or storage key (base64url of 16 bytes).
const HASH_LENGTH: usize = 22;

impl Store {
    /// The live leases of `kind` under `prefix` (locks, the semaphores' permits, or the
    /// locks' shared holders), examining at most `budget` keys; see the module docs.
    pub(super) fn list(
        &self,
        prefix: &KeyPrefix,
        kind: LeaseKind,
        limit: ListLimit,
        budget: usize,
    ) -> Result<LockList<LockRecord>> {
        let listing = match kind {
            LeaseKind::Lock => Listing::locks(&self.keys, prefix),
            LeaseKind::Permit => Listing::permits(&self.keys, prefix),
            LeaseKind::Shared => Listing::shared(&self.keys, prefix),
        };
        self.list_by(&listing, limit, budget)
    }

    /// What `listing` finds, examining at most `budget` keys.
    fn list_by(
        &self,
        listing: &Listing<'_>,
        limit: ListLimit,
        budget: usize,
    ) -> Result<LockList<LockRecord>> {
        let (found, exhausted) = self
            .pool
            .run_on(&self.server, |conn| self.walk(conn, listing, budget))?;
        Ok(LockList::from_unsorted(found, limit, exhausted))
    }

    /// Scans every node (one server, or each primary of a Cluster) while the budget lasts:
    /// the records found, and whether the walk got to its end.
    fn walk(
        &self,
        conn: Conn<'_>,
        listing: &Listing<'_>,
        budget: usize,
    ) -> RedisResult<(Vec<LockRecord>, bool)> {
        let mut walk = Walk {
            budget,
            seen: HashSet::new(),
            found: Vec::new(),
        };
        let exhausted = match conn {
            Conn::Cluster(own) => {
                let mut exhausted = true;
                for (host, port) in primaries(&mut own.connection)? {
                    let mut primary = Primary {
                        connection: &mut own.connection,
                        poisoned: &mut own.poisoned,
                        routing: RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                            host,
                            port,
                        }),
                    };
                    if !self.walk_node(&mut primary, listing, &mut walk)? {
                        exhausted = false;
                        break;
                    }
                }
                exhausted
            }
            mut conn => self.walk_node(&mut SingleServer(conn.as_dyn()), listing, &mut walk)?,
        };
        Ok((walk.found, exhausted))
    }

    /// Scans one node to its end, or until the budget runs out (then `false`).
    fn walk_node(
        &self,
        node: &mut dyn Node,
        listing: &Listing<'_>,
        walk: &mut Walk,
    ) -> RedisResult<bool> {
        let mut cursor: u64 = 0;
        loop {
            if walk.budget == 0 {
                return Ok(false);
            }
            let count = SCAN_COUNT.min(walk.budget);
            walk.budget -= count;
            let mut scan = redis::cmd("SCAN");
            scan.arg(cursor)
                .arg("MATCH")
                .arg(&listing.pattern)
                .arg("COUNT")
                .arg(count);
            let (next, names): (u64, Vec<Vec<u8>>) = parse(node.scan(&scan)?)?;
            let candidates: Vec<String> = names
                .into_iter()
                .filter_map(|name| String::from_utf8(name).ok())
                .filter(|name| listing.is_candidate(name) && walk.seen.insert(name.clone()))
                .collect();
            if !candidates.is_empty() {
                let reads: Vec<Cmd> = candidates.iter().map(|name| listing.read(name)).collect();
                let (now_ms, values) = node.read(&reads)?;
                for (name, value) in candidates.iter().zip(values) {
                    if let Some(value) = value {
                        listing.records(self, name, value, now_ms, &mut walk.found)?;
                    }
                }
            }
            if next == 0 {
                return Ok(true);
            }
            cursor = next;
        }
    }
}

/// Whether `record`, read from `name`, is listed: a SyncGuard record with a valid lock id,
/// stored where it belongs (`stored_under` names where its key's records go), under the
/// prefix, and live at `now_ms`.
fn listable(
    record: LockRecord,
    name: &str,
    stored_under: impl FnOnce(&str) -> Option<String>,
    prefix: &KeyPrefix,
    now_ms: i64,
) -> Option<LockRecord> {
    let belongs = validate_lock_id(&record.lock_id).is_ok()
        && stored_under(&record.key).is_some_and(|home| home == name);
    (belongs
        && prefix.matches(&record.key)
        && is_live(record.expires_at_ms, now_ms, TIME_TOLERANCE_MS))
    .then_some(record)
}

/// A value read as text: `None` when it is no string, or not UTF-8.
fn text(value: Value) -> Option<String> {
    parse::<Vec<u8>>(value)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
}

/// What one listing has used and found so far.
struct Walk {
    /// Keys `SCAN` may still examine.
    budget: usize,
    /// Names already read (`SCAN` may return a key more than once).
    seen: HashSet<String>,
    found: Vec<LockRecord>,
}

/// What a listing reads: lock records, or the semaphores' permits hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// A lock record per name, read with `GET`.
    Locks,
    /// A permits hash per name (`P{T}:sem:permits`, the same in both layouts), read with
    /// `HGETALL`: a permit record per field, filed under its lock id.
    Permits,
    /// A shared holders' records hash per name (`P{T}:shared:records`), read as permits are.
    Shared,
}

/// What a listing looks for: which names it scans for and reads, how it reads them, and which
/// records it keeps of what it read.
struct Listing<'a> {
    kind: Kind,
    prefix: &'a KeyPrefix,
    /// The `MATCH` pattern.
    pattern: String,
    /// What precedes a name's tag (the user key, or its hash): `P:` or `P:{` for locks, `P{`
    /// for permits and shared holders.
    head: String,
    /// What follows the tag: nothing or `}` for locks, [`PERMITS_TAIL`] for permits,
    /// [`SHARED_TAIL`] for shared holders.
    tail: &'static str,
    /// Whether the tag stands between braces, so that it is never empty and holds none.
    braced: bool,
    /// Whether a key under the prefix may be stored under its hash.
    hashed: bool,
}

/// What follows a semaphore's tag in the name of its permits hash.
const PERMITS_TAIL: &str = "}:sem:permits";
/// What follows a lock's tag in the name of its shared holders' records hash.
const SHARED_TAIL: &str = "}:shared:records";

impl<'a> Listing<'a> {
    /// The lock records of the keys under `prefix`.
    fn locks(keys: &Keys, prefix: &'a KeyPrefix) -> Listing<'a> {
        let namespace = escape_glob(keys.prefix());
        match keys.layout() {
            KeyLayout::TypeScript => {
                // `P:K` is hashed when it and the reserve exceed the limit; the longest key is
                // MAX_KEY_LENGTH_BYTES.
                let hashed = keys.prefix().len() + 1 + MAX_KEY_LENGTH_BYTES + STORAGE_KEY_RESERVE
                    > STORAGE_KEY_LIMIT;
                let pattern = if hashed {
                    format!("{namespace}:*")
                } else {
                    format!("{namespace}:{}*", escape_glob(prefix.as_str()))
                };
                Listing {
                    kind: Kind::Locks,
                    prefix,
                    pattern,
                    head: format!("{}:", keys.prefix()),
                    tail: "",
                    braced: false,
                    hashed,
                }
            }
            // Any key with a brace is hashed, whatever its length: the pattern cannot narrow.
            KeyLayout::Cluster => Listing {
                kind: Kind::Locks,
                prefix,
                pattern: format!("{namespace}:{{*"),
                head: format!("{}:{{", keys.prefix()),
                tail: "}",
                braced: true,
                hashed: true,
            },
        }
    }

    /// The permits of the semaphores under `prefix`. The pattern matches every permits hash
    /// of the key prefix: a user key under the listing's prefix may be stored under its hash
    /// (a long key, or any key with a brace), so the user-key prefix cannot narrow it.
    fn permits(keys: &Keys, prefix: &'a KeyPrefix) -> Listing<'a> {
        Listing::holder_sets(keys, prefix, Kind::Permits, PERMITS_TAIL)
    }

    /// The shared holders of the locks under `prefix`, found as [`permits`](Listing::permits)
    /// are.
    fn shared(keys: &Keys, prefix: &'a KeyPrefix) -> Listing<'a> {
        Listing::holder_sets(keys, prefix, Kind::Shared, SHARED_TAIL)
    }

    /// Every hash of records `P{T}…tail` of the key prefix.
    fn holder_sets(
        keys: &Keys,
        prefix: &'a KeyPrefix,
        kind: Kind,
        tail: &'static str,
    ) -> Listing<'a> {
        Listing {
            kind,
            prefix,
            pattern: format!("{}{{*{tail}", escape_glob(keys.prefix())),
            head: format!("{}{{", keys.prefix()),
            tail,
            braced: true,
            hashed: true,
        }
    }

    /// Whether `name` may hold a record of a key under the prefix: its tag is the user key
    /// itself, starting with the prefix, or a hash.
    fn is_candidate(&self, name: &str) -> bool {
        let Some(tag) = name
            .strip_prefix(self.head.as_str())
            .and_then(|rest| rest.strip_suffix(self.tail))
        else {
            return false;
        };
        if self.braced && (tag.is_empty() || tag.contains(['{', '}'])) {
            return false;
        }
        self.prefix.matches(tag) || (self.hashed && looks_hashed(tag))
    }

    /// The command that reads `name`.
    fn read(&self, name: &str) -> Cmd {
        let mut read = redis::cmd(match self.kind {
            Kind::Locks => "GET",
            Kind::Permits | Kind::Shared => "HGETALL",
        });
        read.arg(name);
        read
    }

    /// Adds to `found` the live records under the prefix that `value` — what `name` held at
    /// `now_ms` — holds, each stored where it belongs (a lock record under its key's name; a
    /// permit in its own semaphore's hash, under its own lock id). Anything else (expired
    /// permits not yet reclaimed, values that are no records) is skipped.
    fn records(
        &self,
        store: &Store,
        name: &str,
        value: Value,
        now_ms: i64,
        found: &mut Vec<LockRecord>,
    ) -> RedisResult<()> {
        // Each raw record, with the lock id it is filed under (permits only).
        let stored: Vec<(Option<String>, String)> = match self.kind {
            Kind::Locks => {
                let value: Vec<u8> = parse(value)?;
                String::from_utf8(value)
                    .ok()
                    .map(|raw| (None, raw))
                    .into_iter()
                    .collect()
            }
            Kind::Permits | Kind::Shared => value
                .into_map_iter()
                .map_err(|_| unexpected("HGETALL"))?
                .filter_map(|(field, raw)| Some((Some(text(field)?), text(raw)?)))
                .collect(),
        };
        let home = |key: &str| match self.kind {
            Kind::Locks => store.keys.lock_keys(key).ok().map(|keys| keys.lock),
            Kind::Permits => store.keys.semaphore_keys(key).ok().map(|keys| keys.permits),
            Kind::Shared => store.keys.shared_keys(key).ok().map(|keys| keys.records),
        };
        for (filed_under, raw) in stored {
            let Ok(record) = store.decode(&raw) else {
                continue;
            };
            if filed_under.is_some_and(|lock_id| lock_id != record.lock_id) {
                continue;
            }
            found.extend(listable(record, name, home, self.prefix, now_ms));
        }
        Ok(())
    }
}

/// Whether `tag` could be a hashed key: 22 base64url characters.
fn looks_hashed(tag: &str) -> bool {
    tag.len() == HASH_LENGTH
        && tag
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

/// `text`, matched literally by a `MATCH` pattern.
fn escape_glob(text: &str) -> String {
    let mut escaped = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            escaped.push('\\');
        }
        escaped.push(c);
    }
    escaped
}

fn parse<T: FromRedisValue>(value: Value) -> RedisResult<T> {
    T::from_redis_value(value).map_err(RedisError::from)
}

/// One server to scan and read from.
trait Node {
    /// Runs a `SCAN` on this node.
    fn scan(&mut self, scan: &Cmd) -> RedisResult<Value>;
    /// The node's time in Unix ms and the answer to each of `reads` (`None`: an absent key,
    /// or one of another type).
    fn read(&mut self, reads: &[Cmd]) -> RedisResult<(i64, Vec<Option<Value>>)>;
}

/// A single server, or the primary behind Sentinels: one pipeline per batch.
struct SingleServer<'a>(&'a mut dyn ConnectionLike);

impl Node for SingleServer<'_> {
    fn scan(&mut self, scan: &Cmd) -> RedisResult<Value> {
        scan.query(self.0)
    }

    fn read(&mut self, reads: &[Cmd]) -> RedisResult<(i64, Vec<Option<Value>>)> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        pipe.cmd("TIME");
        for read in reads {
            pipe.add_command(read.clone());
        }
        let mut answers: Vec<RedisResult<Value>> = pipe.query(self.0)?;
        if answers.len() != reads.len() + 1 {
            return Err(short_answer());
        }
        let values = answers.split_off(1);
        let now_ms = unix_ms(answers.remove(0)?)?;
        Ok((
            now_ms,
            values
                .into_iter()
                .map(read_value)
                .collect::<RedisResult<_>>()?,
        ))
    }
}

/// A primary of a Cluster, reached by its address through the cluster connection.
struct Primary<'a> {
    connection: &'a mut ClusterConnection,
    /// The pooled connection's flag: set when a failure may have left it stale.
    poisoned: &'a mut bool,
    routing: RoutingInfo,
}

impl Primary<'_> {
    fn routed(&mut self, cmd: &Cmd) -> RedisResult<Value> {
        let answer = self.connection.route_command(cmd, self.routing.clone());
        if answer
            .as_ref()
            .is_err_and(super::cluster::spoils_the_connection)
        {
            *self.poisoned = true;
        }
        answer
    }
}

impl Node for Primary<'_> {
    fn scan(&mut self, scan: &Cmd) -> RedisResult<Value> {
        self.routed(scan)
    }

    /// The reads go by their keys' slots (to this node, unless a slot is migrating), all at
    /// once; `TIME` to this node, after them.
    fn read(&mut self, reads: &[Cmd]) -> RedisResult<(i64, Vec<Option<Value>>)> {
        let answers = node::pipeline(self.connection, &reads.iter().collect::<Vec<_>>());
        if answers.iter().any(|answer| {
            answer
                .as_ref()
                .is_err_and(super::cluster::spoils_the_connection)
        }) {
            *self.poisoned = true;
        }
        let values = answers
            .into_iter()
            .map(read_value)
            .collect::<RedisResult<Vec<_>>>()?;
        let now_ms = unix_ms(self.routed(&redis::cmd("TIME"))?)?;
        Ok((now_ms, values))
    }
}

/// A read's answer: the value, `None` for an absent key (`GET`'s nil) or one of another type
/// (`WRONGTYPE`: not a record), the error otherwise.
fn read_value(answer: RedisResult<Value>) -> RedisResult<Option<Value>> {
    match answer {
        Ok(Value::Nil) => Ok(None),
        Ok(value) => Ok(Some(value)),
        Err(error) if error.code() == Some("WRONGTYPE") => Ok(None),
        Err(error) => Err(error),
    }
}

/// `TIME`'s answer in Unix ms.
fn unix_ms(time: Value) -> RedisResult<i64> {
    let (seconds, micros): (i64, i64) = parse(time)?;
    Ok(seconds * 1000 + micros / 1000)
}

fn short_answer() -> RedisError {
    RedisError::from((redis::ErrorKind::Client, "Redis answered a pipeline short"))
}

/// The primaries of the Cluster, by address, from `CLUSTER SLOTS` (each range's first node).
fn primaries(connection: &mut ClusterConnection) -> RedisResult<Vec<(String, u16)>> {
    let slots = connection.route_command(
        &redis::cmd("CLUSTER").arg("SLOTS").clone(),
        RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
    )?;
    let Value::Array(ranges) = slots else {
        return Err(unexpected("CLUSTER SLOTS"));
    };
    let mut primaries: Vec<(String, u16)> = Vec::new();
    for range in ranges {
        let Value::Array(mut range) = range else {
            return Err(unexpected("CLUSTER SLOTS"));
        };
        if range.len() < 3 {
            return Err(unexpected("CLUSTER SLOTS"));
        }
        let Value::Array(mut node) = range.swap_remove(2) else {
            return Err(unexpected("CLUSTER SLOTS"));
        };
        if node.len() < 2 {
            return Err(unexpected("CLUSTER SLOTS"));
        }
        let port: u16 = parse(node.swap_remove(1))?;
        let host: String = parse(node.swap_remove(0))?;
        if !primaries.contains(&(host.clone(), port)) {
            primaries.push((host, port));
        }
    }
    Ok(primaries)
}

fn unexpected(what: &'static str) -> RedisError {
    RedisError::from((
        redis::ErrorKind::Client,
        "unexpected answer",
        format!("{what} answered in an unexpected shape"),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan_names(layout: KeyLayout, namespace: &str, prefix: &str, names: &[&str]) -> Vec<bool> {
        let keys = Keys::new(namespace.to_owned(), layout).unwrap();
        let prefix = KeyPrefix::new(prefix).unwrap();
        let plan = Listing::locks(&keys, &prefix);
        names.iter().map(|name| plan.is_candidate(name)).collect()
    }

    #[test]
    fn patterns_are_as_narrow_as_the_layout_allows() {
        let keys = Keys::new("app*".to_owned(), KeyLayout::TypeScript).unwrap();
        let prefix = KeyPrefix::new("job[1]").unwrap();
        assert_eq!(Listing::locks(&keys, &prefix).pattern, r"app\*:job\[1\]*");
        let long = Keys::new("p".repeat(500), KeyLayout::TypeScript).unwrap();
        assert_eq!(
            Listing::locks(&long, &prefix).pattern,
            format!("{}:*", "p".repeat(500))
        );
        let cluster = Keys::new("app".to_owned(), KeyLayout::Cluster).unwrap();
        assert_eq!(Listing::locks(&cluster, &prefix).pattern, "app:{*");
    }

    #[test]
    fn candidates_carry_the_prefix_or_a_hash() {
        let hash = "AAAAAAAAAAAAAAAAAAAAAA";
        assert_eq!(
            plan_names(
                KeyLayout::TypeScript,
                "sg",
                "job",
                &["sg:job1", "sg:jo", &format!("sg:{hash}"), "other:job"]
            ),
            [true, false, false, false]
        );
        let long = "p".repeat(500);
        assert_eq!(
            plan_names(
                KeyLayout::TypeScript,
                &long,
                "job",
                &[&format!("{long}:{hash}"), &format!("{long}:jo")]
            ),
            [true, false]
        );
        assert_eq!(
            plan_names(
                KeyLayout::Cluster,
                "sg",
                "job",
                &[
                    "sg:{job1}",
                    &format!("sg:{{{hash}}}"),
                    "sg:{jo}",
                    "sg:id:{job}",
                    "sg:{job"
                ]
            ),
            [true, true, false, false, false]
        );
    }

    /// Permits hashes are matched under the key prefix alone, in either layout; read are the
    /// ones whose tag is a key under the prefix or a hash, never a lock's key.
    #[test]
    fn permit_plans_match_every_semaphore_of_the_namespace() {
        let hash = "AAAAAAAAAAAAAAAAAAAAAA";
        for layout in [KeyLayout::TypeScript, KeyLayout::Cluster] {
            let keys = Keys::new("app*".to_owned(), layout).unwrap();
            let prefix = KeyPrefix::new("job[1]").unwrap();
            let plan = Listing::permits(&keys, &prefix);
            assert_eq!(plan.pattern, r"app\*{*}:sem:permits");
            let names = [
                "app*{job[1]x}:sem:permits".to_owned(),
                format!("app*{{{hash}}}:sem:permits"),
                "app*{job}:sem:permits".to_owned(),
                "app*{job[1]x}:sem:holders".to_owned(),
                "app*:{job[1]x}".to_owned(),
                "app*{a{job[1]}:sem:permits".to_owned(),
                "app*{}:sem:permits".to_owned(),
            ];
            let candidates: Vec<bool> = names.iter().map(|name| plan.is_candidate(name)).collect();
            assert_eq!(
                candidates,
                [true, true, false, false, false, false, false],
                "{layout:?}"
            );
            let sem = keys.semaphore_keys("job[1]x").unwrap();
            assert!(plan.is_candidate(&sem.permits));
            let braced = keys.semaphore_keys("job[1]{x}").unwrap();
            assert!(plan.is_candidate(&braced.permits), "{}", braced.permits);
        }
    }
}
