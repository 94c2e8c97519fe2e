//! The cluster layout's operations: a lock's record and fence counter share the key's hash
//! slot, its index entry `P:id:{lockId}` lies in the lock id's own slot, so no script touches
//! the index entry. Lock ids are plain 16-byte CSPRNG ids (128 bits), never chosen to hash
//! anywhere.
//!
//! Requests per operation:
//!
//! | operation | one server / Sentinel | Cluster |
//! |---|---|---|
//! | acquire | 1: pipeline [acquire script on the record, `SET I L PX ttl`] | 1 when refused; 2 when granted: the script, then `SET I` |
//! | release through a guard (key known) | 1: pipeline [release script, `DEL I`] | 1: the script; `I` expires with its TTL |
//! | extend through a guard (key known) | 1: pipeline [extend script, `PEXPIRE I ttl`] | 2: the script, then `PEXPIRE I` when applied |
//! | by bare lock id (`release/extend --lock-id`, lookup) | `GET I`, then as above | `GET I`, then as above |
//! | batch renewal | 1 pipeline for all | per lease, as extend |
//!
//! A Cluster pipeline across slots would save the second request, but redis-rs' cluster
//! pipeline only runs over its own node connection type, not over ours with its deadlines.
//!
//! Crash windows, and why they are safe: every script compares the lock id stored in the
//! record, so an index entry that points at a record another holder owns (a stale entry, or
//! one written by a pipelined acquire that was refused) can never release or extend that lock;
//! it answers "not found" and expires with its TTL. An index entry that is missing (a crash
//! between the script and `SET I` on a Cluster, a release whose `DEL I` was skipped) only
//! means that a bare lock id cannot find its lock until the lock expires; a guard, which knows
//! its key, never reads the index.

use redis::{Cmd, RedisResult, ScriptInvocation, Value};

use super::RedisBackend;
use super::connection::Conn;
use super::scripts::{self, Reply, SCRIPTS, Status};
use crate::driver::{Extension, LeaseRef, LockId, LockRecord, Outcome, TIME_TOLERANCE_MS, Ttl};
use crate::error::Result;

/// What a Cluster does with the index command after the script.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum OnCluster {
    /// Nothing: the index entry expires with its TTL.
    Skip,
    /// Send it when the script applied (granted, extended).
    AfterSuccess,
}

/// Runs `invocation` (a script on one record) and `index` (a command on its index entry): in
/// one pipeline on one server, one after the other on a Cluster (see the module docs).
pub(super) fn script_with_index(
    conn: &mut Conn<'_>,
    invocation: &ScriptInvocation<'_>,
    index: &Cmd,
    on_cluster: OnCluster,
) -> RedisResult<Value> {
    match conn {
        Conn::Single(conn) => {
            let mut pipe = redis::pipe();
            pipe.invoke_script(invocation)
                .add_command(index.clone())
                .ignore();
            let sent = |conn: &mut redis::Connection| -> RedisResult<Value> {
                let mut values: Vec<Value> = pipe.query(conn)?;
                values.pop().ok_or_else(|| {
                    redis::RedisError::from((redis::ErrorKind::Client, "empty reply"))
                })
            };
            match sent(conn) {
                // A pipeline does not load scripts by itself (after a server restart, say).
                Err(error)
                    if error.kind()
                        == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) =>
                {
                    invocation.load(*conn)?;
                    sent(conn)
                }
                answer => answer,
            }
        }
        Conn::Cluster(conn) => {
            let value = invocation.invoke(*conn)?;
            if on_cluster == OnCluster::AfterSuccess && scripts::granted(&value) {
                index.query::<Value>(*conn)?;
            }
            Ok(value)
        }
    }
}

impl RedisBackend {
    /// The record key of a lease: from its key, else from its index entry (one request);
    /// `None` when the index entry is gone.
    fn record_key_of(&self, lease: LeaseRef<'_>) -> Result<Option<String>> {
        if let Some(key) = lease.key {
            return Ok(Some(self.keys.lock_keys(key.as_str())?.lock));
        }
        let index_key = self.keys.index_key(lease.lock_id);
        self.pool.run(&self.server, |conn| {
            redis::cmd("GET")
                .arg(&index_key)
                .query::<Option<String>>(conn)
        })
    }

    /// Release in the cluster layout.
    pub(super) fn release_split(&self, lease: LeaseRef<'_>) -> Result<Outcome<()>> {
        let Some(lock_key) = self.record_key_of(lease)? else {
            return Ok(Outcome::NotFound);
        };
        let mut invocation = SCRIPTS.release_record.key(&lock_key);
        invocation
            .arg(lease.lock_id.as_str())
            .arg(TIME_TOLERANCE_MS);
        let mut delete = redis::cmd("DEL");
        delete.arg(self.keys.index_key(lease.lock_id));
        let value = self.pool.run_on(&self.server, |mut conn| {
            script_with_index(&mut conn, &invocation, &delete, OnCluster::Skip)
        })?;
        self.outcome(&mut Reply::parse(value)?, lease.lock_id, |_| Ok(()))
    }

    /// Extend in the cluster layout.
    pub(super) fn extend_split(&self, lease: LeaseRef<'_>, ttl: Ttl) -> Result<Outcome<Extension>> {
        let Some(lock_key) = self.record_key_of(lease)? else {
            return Ok(Outcome::NotFound);
        };
        let mut invocation = SCRIPTS.extend_record.key(&lock_key);
        invocation
            .arg(lease.lock_id.as_str())
            .arg(TIME_TOLERANCE_MS)
            .arg(ttl.as_millis());
        let mut pexpire = redis::cmd("PEXPIRE");
        pexpire
            .arg(self.keys.index_key(lease.lock_id))
            .arg(ttl.as_millis());
        let value = self.pool.run_on(&self.server, |mut conn| {
            script_with_index(&mut conn, &invocation, &pexpire, OnCluster::AfterSuccess)
        })?;
        self.outcome(&mut Reply::parse(value)?, lease.lock_id, |reply| {
            Ok(Extension {
                expires_at_ms: reply.int()?,
                version: None,
            })
        })
    }

    /// Lookup by lock id in the cluster layout: the index entry, then the record, which must
    /// carry this lock id.
    pub(super) fn find_split(&self, lock_id: &LockId) -> Result<Option<LockRecord>> {
        let Some(lock_key) = self.record_key_of(LeaseRef::new(lock_id))? else {
            return Ok(None);
        };
        let mut reply = Reply::parse(self.pool.run(&self.server, |conn| {
            SCRIPTS
                .lookup_key
                .key(&lock_key)
                .arg(TIME_TOLERANCE_MS)
                .invoke(conn)
        })?)?;
        match reply.status {
            Status::Ok => {}
            Status::Foreign => return Err(self.foreign(None).with_lock_id(lock_id.as_str())),
            _ => return Ok(None),
        }
        let record = self.decode(&reply.string()?)?;
        Ok((record.lock_id == lock_id.as_str()).then_some(record))
    }
}
