//! The cluster layout's operations: a lock's record and fence counter share the key's hash
//! slot, its index entry `P:id:{lockId}` lies in the lock id's own slot, so no script touches
//! the index entry. Lock ids are plain 16-byte CSPRNG ids (128 bits), never chosen to hash
//! anywhere.
//!
//! Every operation sends its script and the command on its index entry together: one pipeline
//! on one server, and on a Cluster one round trip across the two nodes (`node::pipeline`).
//!
//! | operation | requests (round trips) |
//! |---|---|
//! | acquire | [acquire script on the record, `SET I L PX ttl`] |
//! | release through a guard (key known) | [release script, `DEL I`] |
//! | extend through a guard (key known) | [extend script, `PEXPIRE I ttl`] |
//! | by bare lock id (`release/extend --lock-id`, lookup) | `GET I`, then as above |
//! | batch renewal | all leases' [extend script, `PEXPIRE I`] in one pipeline |
//!
//! The script is the truth; the index entry follows it. A refused acquire's `SET I` leaves an
//! entry pointing at a record another lock id owns, and every script compares the lock id
//! stored in the record, so such an entry (or any stale one) can never release or extend that
//! lock: it answers "not found" and expires with its TTL. On a Cluster the two commands reach
//! different nodes, and one can fail while the other applies:
//! - acquire granted, `SET I` failed: the lock could not be found by its lock id, so it is
//!   released again and the acquire fails (transient), leaving nothing locked;
//! - extend or release applied, its index command failed: the answer stands (a guard knows its
//!   key and never reads the index) and a warning is logged; until the lock's new expiry, a bare
//!   lock id may then not find it (after an extension), or find an entry that answers "not
//!   found" (after a release).
//!
//! A crash between the two writes leaves the same states.

use redis::{Cmd, RedisError, RedisResult, ScriptInvocation, Value};

use super::RedisBackend;
use super::errors::{Phase, map_error};
use super::pool::Conn;
use super::scripts::{Reply, SCRIPTS, Status};
use crate::driver::{
    Extension, Key, LeaseRef, LockId, LockRecord, Outcome, TIME_TOLERANCE_MS, Ttl,
};
use crate::error::Result;

/// The answers of a script on a record and of a command on its index entry, sent together.
pub(super) struct WithIndex {
    pub script: Value,
    pub index: RedisResult<Value>,
}

/// Sends `invocation` (a script on one record) and `index` (a command on its index entry)
/// together: one round trip (see the module docs). `Err` when the script has no answer.
pub(super) fn script_with_index(
    conn: &mut Conn<'_>,
    invocation: &ScriptInvocation<'_>,
    script: &redis::Script,
    index: Cmd,
) -> RedisResult<WithIndex> {
    let mut pipe = redis::pipe();
    pipe.invoke_script(invocation).add_command(index);
    let mut answers = conn.pipeline(&mut pipe, script)?.into_iter();
    match (answers.next(), answers.next()) {
        (Some(script), Some(index)) => Ok(WithIndex {
            script: script?,
            index,
        }),
        _ => Err(redis::RedisError::from((
            redis::ErrorKind::Client,
            "Redis answered a pipeline short",
        ))),
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
        let answers = self.pool.run_on(&self.server, |mut conn| {
            script_with_index(
                &mut conn,
                &invocation,
                &SCRIPTS.release_record,
                delete.clone(),
            )
        })?;
        if let Err(error) = answers.index {
            self.index_not_followed(lease.key, "release", vec![error]);
        }
        self.outcome(
            &mut Reply::parse(answers.script)?,
            lease.lock_id,
            |_| Ok(()),
        )
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
        let answers = self.pool.run_on(&self.server, |mut conn| {
            script_with_index(
                &mut conn,
                &invocation,
                &SCRIPTS.extend_record,
                self.index_pexpire(lease.lock_id, ttl),
            )
        })?;
        if let Err(error) = answers.index {
            self.index_not_followed(lease.key, "extension", vec![error]);
        }
        self.extension(answers.script, lease.lock_id)
    }

    /// `PEXPIRE` of a lock id's index entry.
    pub(super) fn index_pexpire(&self, lock_id: &LockId, ttl: Ttl) -> Cmd {
        let mut pexpire = redis::cmd("PEXPIRE");
        pexpire
            .arg(self.keys.index_key(lock_id))
            .arg(ttl.as_millis());
        pexpire
    }

    /// Logs index commands that failed after their scripts answered (one line for a batch):
    /// the answers stand (see the module docs).
    pub(super) fn index_not_followed(
        &self,
        key: Option<&Key>,
        operation: &str,
        failures: Vec<RedisError>,
    ) {
        let count = failures.len();
        let Some(first) = failures.into_iter().next() else {
            return;
        };
        let error = map_error(first, &self.server, Phase::Call);
        let locks = match key {
            Some(key) => format!("the lock on {:?}", key.as_str()),
            None if count == 1 => "a lock".to_owned(),
            None => format!("{count} locks"),
        };
        log::warn!(
            "syncguard: the {operation} of {locks} applied, but the index entry could not \
             follow ({error}); until the lock expires its bare lock id may not find it"
        );
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
            Status::Foreign => {
                return Err(self
                    .refusal(&mut reply, None)
                    .with_lock_id(lock_id.as_str()));
            }
            _ => return Ok(None),
        }
        let record = self.decode(&reply.string()?)?;
        Ok((record.lock_id == lock_id.as_str()).then_some(record))
    }
}
