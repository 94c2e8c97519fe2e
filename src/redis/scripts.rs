//! The Lua scripts (one per operation, each one round trip) and their replies.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation, Value};

use crate::driver::{LeaseRef, TIME_TOLERANCE_MS, Ttl};
use crate::error::{LockError, Result};

/// A script: the prelude, then the given parts of `scripts/` in order (shared parts first).
macro_rules! script {
    ($($file:literal),+) => {
        Script::new(concat!(
            include_str!("scripts/prelude.lua"),
            $(include_str!(concat!("scripts/", $file))),+
        ))
    };
}

/// Every script, hashed once; `Script::invoke` sends EVALSHA and loads the script on NOSCRIPT
/// (after a server restart, say).
pub(crate) struct Scripts {
    pub acquire: Script,
    pub acquire_all: Script,
    pub release: Script,
    pub extend: Script,
    pub release_record: Script,
    pub extend_record: Script,
    pub is_locked: Script,
    pub lookup_key: Script,
    pub lookup_id: Script,
    pub semaphore_acquire: Script,
    pub shared_acquire: Script,
    pub semaphore_release: Script,
    pub semaphore_extend: Script,
    pub semaphore_holders: Script,
    pub line_leave: Script,
    pub line_find: Script,
    pub line_judge: Script,
    /// A renewal that also replaces the holder text (a leader's proclaim), apart from the
    /// heartbeat's `extend` and `extend_record`.
    pub proclaim: Script,
    pub proclaim_record: Script,
    /// An operator's break (`breaking.rs`).
    pub break_lock: Script,
    pub break_holders: Script,
}

pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    acquire: script!("line.lua", "lock.lua", "acquire.lua"),
    acquire_all: script!("line.lua", "lock.lua", "acquire_all.lua"),
    release: script!("release.lua"),
    extend: script!("extend.lua"),
    release_record: script!("release_record.lua"),
    extend_record: script!("extend_record.lua"),
    is_locked: script!("is_locked.lua"),
    lookup_key: script!("lookup_key.lua"),
    lookup_id: script!("lookup_id.lua"),
    semaphore_acquire: script!(
        "semaphore.lua",
        "line.lua",
        "holder_acquire.lua",
        "semaphore_acquire.lua"
    ),
    shared_acquire: script!(
        "semaphore.lua",
        "line.lua",
        "holder_acquire.lua",
        "shared_acquire.lua"
    ),
    semaphore_release: script!("semaphore.lua", "semaphore_release.lua"),
    semaphore_extend: script!("semaphore.lua", "semaphore_extend.lua"),
    semaphore_holders: script!("semaphore.lua", "semaphore_holders.lua"),
    line_leave: script!("line.lua", "line_leave.lua"),
    line_find: script!("line.lua", "line_find.lua"),
    line_judge: script!("line.lua", "lock.lua", "line_judge.lua"),
    proclaim: script!("proclaim.lua"),
    proclaim_record: script!("proclaim_record.lua"),
    break_lock: script!("break.lua", "break_lock.lua"),
    break_holders: script!("semaphore.lua", "break.lua", "break_holders.lua"),
});

/// A lock's renewal of `lease` for `ttl`, by the script `renew` on `target` (its index key or
/// its record, as the layout's script expects); a lease that carries a holder text (a
/// leader's proclaim) goes by `proclaim` instead, with that text after the same arguments, so
/// that the heartbeat's renewal stays as it was. The script chosen, and its invocation.
pub(crate) fn lock_renewal<'s>(
    target: &str,
    lease: LeaseRef<'_>,
    ttl: Ttl,
    renew: &'s Script,
    proclaim: &'s Script,
) -> (&'s Script, ScriptInvocation<'s>) {
    let script = match lease.holder {
        Some(_) => proclaim,
        None => renew,
    };
    let mut invocation = script.key(target);
    invocation
        .arg(lease.lock_id.as_str())
        .arg(TIME_TOLERANCE_MS)
        .arg(ttl.as_millis());
    if let Some(holder) = lease.holder {
        invocation.arg(holder.as_str());
    }
    (script, invocation)
}

/// The status that opens every reply (see `prelude.lua`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Status {
    Ok,
    /// Acquire: held by another. Reads: no live lock.
    Absent,
    NotFound,
    Expired,
    /// Acquire: the fence counter reached the limit; then the counter's key.
    FenceOverflow,
    /// Acquire: the fence counter holds no counter; then its key and why.
    BadCounter,
    /// A key holds a value that is not a SyncGuard lock record (or, for an index entry, not
    /// a key name); then that key and why. Every script answers so before writing anything.
    Foreign,
}

/// Whether a raw acquire reply says the lock was granted (before it is parsed).
pub(crate) fn granted(value: &Value) -> bool {
    matches!(value, Value::Array(values) if matches!(values.first(), Some(Value::Int(1))))
}

/// A parsed script reply: the status and the values after it.
pub(crate) struct Reply {
    pub status: Status,
    values: std::vec::IntoIter<Value>,
}

impl Reply {
    pub fn parse(value: Value) -> Result<Reply> {
        let Value::Array(values) = value else {
            return Err(unexpected("a script replied with a non-array"));
        };
        let mut values = values.into_iter();
        let status = match values.next() {
            Some(Value::Int(1)) => Status::Ok,
            Some(Value::Int(0)) => Status::Absent,
            Some(Value::Int(-1)) => Status::NotFound,
            Some(Value::Int(-2)) => Status::Expired,
            Some(Value::Int(-3)) => Status::FenceOverflow,
            Some(Value::Int(-4)) => Status::BadCounter,
            Some(Value::Int(-9)) => Status::Foreign,
            _ => return Err(unexpected("a script replied with an unknown status")),
        };
        Ok(Reply { status, values })
    }

    pub fn int(&mut self) -> Result<i64> {
        match self.values.next() {
            Some(Value::Int(n)) => Ok(n),
            _ => Err(unexpected("a script reply lacks an expected integer")),
        }
    }

    /// The next value read as a ticket of a place in line: a number, or `''` for none.
    pub fn ticket(&mut self) -> Result<Option<u64>> {
        let ticket = self.string()?;
        if ticket.is_empty() {
            return Ok(None);
        }
        let ticket = ticket.parse::<u64>();
        ticket
            .map(Some)
            .map_err(|_| unexpected("a ticket is not a number"))
    }

    /// The next value read as a waiter's position in line (`line_position` in
    /// `scripts/line.lua`): how many places stand ahead of its own, `None` (-1) when it
    /// stands in none.
    pub fn position(&mut self) -> Result<Option<u64>> {
        Ok(u64::try_from(self.int()?).ok())
    }

    /// The next string of the reply, left unread (the Redis key a refusal names).
    pub fn peek_string(&self) -> Option<&[u8]> {
        match self.values.as_slice().first() {
            Some(Value::BulkString(bytes)) => Some(bytes),
            Some(Value::SimpleString(s)) => Some(s.as_bytes()),
            _ => None,
        }
    }

    /// Whether every value of the reply was read.
    pub fn is_done(&self) -> bool {
        self.values.as_slice().is_empty()
    }

    /// Every string left in the reply (a list of records).
    pub fn strings(mut self) -> Result<Vec<String>> {
        let mut strings = Vec::with_capacity(self.values.len());
        while !self.is_done() {
            strings.push(self.string()?);
        }
        Ok(strings)
    }

    pub fn string(&mut self) -> Result<String> {
        match self.values.next() {
            Some(Value::BulkString(bytes)) => String::from_utf8(bytes)
                .map_err(|_| unexpected("a script reply holds a string that is not UTF-8")),
            Some(Value::SimpleString(s)) => Ok(s),
            _ => Err(unexpected("a script reply lacks an expected string")),
        }
    }
}

fn unexpected(what: &str) -> LockError {
    LockError::internal(format!("unexpected reply from Redis: {what}"))
}
