//! What every operation works with, in either key layout — the connections, the server (for
//! messages) and the key names — and what a script's reply means: a lock record, an outcome,
//! a refusal of what the script found.

use std::sync::Arc;

use redis::{Pipeline, RedisError, Script};
use serde::Deserialize;

use super::errors::{Phase, Server, map_error};
use super::layout::Keys;
use super::pool::Pool;
use super::scripts::{Reply, SCRIPTS, Status};
use crate::driver::{Extension, FENCE_MAX, Key, LockId, LockRecord, Outcome, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};
use crate::fence::Fence;

/// The connections, the server and the key names of one backend.
pub(crate) struct Store {
    pub pool: Pool,
    /// Where the server is and what messages must not show.
    pub server: Arc<Server>,
    pub keys: Keys,
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

impl Store {
    /// Runs one script (or command) on a pooled connection and reads its reply.
    pub fn run(
        &self,
        call: impl FnMut(&mut dyn redis::ConnectionLike) -> redis::RedisResult<redis::Value>,
    ) -> Result<Reply> {
        Reply::parse(self.pool.run(&self.server, call)?)
    }

    /// Runs one script about `key` whose only good answer is `OK` (a line's or a holder set's
    /// read or write) and reads its reply: a refusal of what is stored, or any other status,
    /// is the error it means.
    pub fn run_ok(
        &self,
        key: &Key,
        call: impl FnMut(&mut dyn redis::ConnectionLike) -> redis::RedisResult<redis::Value>,
    ) -> Result<Reply> {
        let mut reply = self.run(call)?;
        match reply.status {
            Status::Ok => Ok(reply),
            Status::Foreign => Err(self.refusal(&mut reply, Some(key))),
            _ => Err(self.foreign(Some(key.as_str()))),
        }
    }

    /// Reads the live record stored under `lock_key` (the lookup script), in either layout.
    pub fn lookup(&self, lock_key: &str) -> Result<Reply> {
        self.run(|conn| {
            SCRIPTS
                .lookup_key
                .key(lock_key)
                .arg(TIME_TOLERANCE_MS)
                .invoke(conn)
        })
    }

    /// The error for a value under a lock key that is no lock record (`key`: the user key,
    /// where known).
    pub fn foreign(&self, key: Option<&str>) -> LockError {
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
    pub fn refusal(&self, reply: &mut Reply, key: Option<&Key>) -> LockError {
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

    pub fn decode(&self, raw: &str) -> Result<LockRecord> {
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
    pub fn outcome<T>(
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
    pub fn extension(&self, value: redis::Value, lock_id: &LockId) -> Result<Outcome<Extension>> {
        self.outcome(&mut Reply::parse(value)?, lock_id, |reply| {
            Ok(Extension {
                expires_at_ms: reply.int()?,
                version: None,
            })
        })
    }

    /// Sends a batch of renewals in one pipeline (one round trip on one server, one per node
    /// on a Cluster), `per_lease` commands for each of `lock_ids`, its extend script (`script`)
    /// first. Each lease's outcome, and the failures of the commands after the scripts.
    pub fn renew(
        &self,
        pipe: &mut Pipeline,
        script: &Script,
        lock_ids: &[&LockId],
        per_lease: usize,
    ) -> (Vec<Result<Outcome<Extension>>>, Vec<RedisError>) {
        let answers = self
            .pool
            .run_on(&self.server, |mut conn| conn.pipeline(pipe, script));
        // The answers are taken in chunks of `per_lease`, so a lease can only ever read the
        // answers of its own commands.
        let mut unfollowed = Vec::new();
        let outcomes = match answers {
            Ok(answers) if answers.len() == lock_ids.len() * per_lease => {
                let mut answers = answers.into_iter();
                lock_ids
                    .iter()
                    .map(|lock_id| {
                        let mut own = answers.by_ref().take(per_lease);
                        let script = own.next();
                        unfollowed.extend(own.filter_map(std::result::Result::err));
                        match script {
                            Some(Ok(value)) => self.extension(value, lock_id),
                            Some(Err(error)) => Err(map_error(error, &self.server, Phase::Call)),
                            None => Err(LockError::internal("Redis answered a pipeline short")),
                        }
                    })
                    .collect()
            }
            Ok(_) => failed_all(lock_ids.len(), || {
                LockError::internal("Redis answered a pipeline short")
            }),
            Err(error) => failed_all(lock_ids.len(), || {
                LockError::new(error.code(), error.message())
            }),
        };
        (outcomes, unfollowed)
    }
}

/// The same error for each of `count` renewals.
pub(crate) fn failed_all(
    count: usize,
    error: impl Fn() -> LockError,
) -> Vec<Result<Outcome<Extension>>> {
    (0..count).map(|_| Err(error())).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn whole_ms_rejects_fractions() {
        assert_eq!(whole_ms(1.7e12).unwrap(), 1_700_000_000_000);
        assert!(whole_ms(1.5).is_err());
        assert!(whole_ms(f64::NAN).is_err());
    }
}
