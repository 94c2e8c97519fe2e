//! The Lua scripts (one per operation, each one round trip) and their replies.

use std::sync::LazyLock;

use redis::{Script, ScriptInvocation, Value};

use crate::driver::{LeaseRef, TIME_TOLERANCE_MS, Ttl};
use crate::error::{LockError, Result};

/// A script's text: the prelude, then the given parts of `scripts/` in order (the shared parts
/// it calls first). Each script carries only the shared parts it calls: every `local function`
/// of a script is a closure made again on each call.
macro_rules! script_text {
    ($($file:literal),+) => {
        concat!(
            include_str!("scripts/prelude.lua"),
            $(include_str!(concat!("scripts/", $file))),+
        )
    };
}

/// [`Scripts`], [`SCRIPTS`] and, for the tests, every script's name and text.
macro_rules! scripts {
    ($($(#[$doc:meta])* $name:ident: [$($file:literal),+],)+) => {
        /// Every script, hashed once; `Script::invoke` sends EVALSHA and loads the script on
        /// NOSCRIPT (after a server restart, say).
        pub(crate) struct Scripts {
            $($(#[$doc])* pub $name: Script,)+
        }

        pub(crate) static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
            $($name: Script::new(script_text!($($file),+)),)+
        });

        #[cfg(test)]
        const TEXTS: &[(&str, &str)] = &[$((stringify!($name), script_text!($($file),+)),)+];
    };
}

scripts! {
    /// A lock's acquisition: a free key is taken in `acquire_free.lua`, before the parts only
    /// a key in use needs (`typed.lua`, `record.lua`, `line.lua`, `lock.lua`) are defined.
    acquire: ["fence.lua", "take.lua", "acquire_free.lua", "typed.lua", "record.lua", "line.lua",
        "lock.lua", "acquire.lua"],
    acquire_all: ["typed.lua", "fence.lua", "take.lua", "record.lua", "line.lua", "lock.lua",
        "acquire_all.lua"],
    release: ["record.lua", "owned.lua", "release.lua"],
    extend: ["record.lua", "owned.lua", "extend.lua"],
    release_record: ["record.lua", "owned.lua", "release_record.lua"],
    extend_record: ["record.lua", "owned.lua", "extend_record.lua"],
    is_locked: ["record.lua", "is_locked.lua"],
    lookup_key: ["record.lua", "lookup_key.lua"],
    lookup_id: ["record.lua", "lookup_id.lua"],
    semaphore_acquire: ["typed.lua", "record.lua", "fence.lua", "take.lua", "semaphore.lua",
        "line.lua", "holder_acquire.lua", "semaphore_acquire.lua"],
    shared_acquire: ["typed.lua", "record.lua", "fence.lua", "take.lua", "semaphore.lua",
        "line.lua", "holder_acquire.lua", "shared_acquire.lua"],
    semaphore_release: ["typed.lua", "record.lua", "semaphore.lua", "semaphore_release.lua"],
    semaphore_extend: ["typed.lua", "record.lua", "semaphore.lua", "semaphore_extend.lua"],
    semaphore_holders: ["typed.lua", "record.lua", "semaphore.lua", "semaphore_holders.lua"],
    line_leave: ["typed.lua", "line.lua", "line_leave.lua"],
    line_find: ["typed.lua", "line.lua", "line_find.lua"],
    line_judge: ["typed.lua", "take.lua", "record.lua", "line.lua", "lock.lua", "line_judge.lua"],
    /// A renewal that also replaces the holder text (a leader's proclaim), apart from the
    /// heartbeat's `extend` and `extend_record`.
    proclaim: ["record.lua", "owned.lua", "proclaim.lua"],
    proclaim_record: ["record.lua", "owned.lua", "proclaim_record.lua"],
    /// An operator's break (`breaking.rs`).
    break_lock: ["typed.lua", "record.lua", "fence.lua", "take.lua", "break.lua",
        "break_lock.lua"],
    break_holders: ["typed.lua", "record.lua", "fence.lua", "take.lua", "semaphore.lua",
        "break.lua", "break_holders.lua"],
}

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::TEXTS;

    /// The code of a line of Lua: its string literals blanked and its comment cut off.
    fn code(line: &str) -> String {
        let mut code = String::with_capacity(line.len());
        let mut chars = line.chars().peekable();
        while let Some(c) = chars.next() {
            match c {
                '\'' | '"' => {
                    code.push(' ');
                    while let Some(inner) = chars.next() {
                        if inner == '\\' {
                            chars.next();
                        } else if inner == c {
                            break;
                        }
                    }
                }
                '-' if chars.peek() == Some(&'-') => break,
                _ => code.push(c),
            }
        }
        code
    }

    /// The names a line of code uses, fields and methods (after `.` or `:`) left out.
    fn used(code: &str) -> Vec<&str> {
        let mut names = Vec::new();
        let mut start = None;
        for (i, c) in code.char_indices().chain([(code.len(), ' ')]) {
            let part = c.is_ascii_alphanumeric() || c == '_';
            match (start, part) {
                (None, true) => start = Some(i),
                (Some(from), false) => {
                    let field = code[..from].ends_with(['.', ':']);
                    let name = &code[from..i];
                    if !field && !name.starts_with(|c: char| c.is_ascii_digit()) {
                        names.push(name);
                    }
                    start = None;
                }
                _ => {}
            }
        }
        names
    }

    /// What a line defines for the whole script (at its first column): `local function NAME`,
    /// or the upper-case constants of `local A, B = ...`.
    fn defined(line: &str) -> Vec<&str> {
        if let Some(function) = line.strip_prefix("local function ") {
            return function.split('(').next().into_iter().collect();
        }
        let Some((names, _)) = line.strip_prefix("local ").and_then(|l| l.split_once('=')) else {
            return Vec::new();
        };
        names
            .split(',')
            .map(str::trim)
            .filter(|name| name.chars().all(|c| c.is_ascii_uppercase() || c == '_'))
            .collect()
    }

    /// Every script carries each shared function and constant it names, defined before the
    /// line that names it (a part missing, or out of order, would fail only when Redis reaches
    /// that line: an undefined global).
    #[test]
    fn every_script_defines_what_it_calls_before_it_calls_it() {
        let shared: BTreeSet<&str> = TEXTS
            .iter()
            .flat_map(|(_, text)| text.lines().flat_map(defined))
            .collect();
        assert!(
            shared.contains("take_fence") && shared.contains("OK"),
            "{shared:?}"
        );
        for (script, text) in TEXTS {
            let mut known = BTreeSet::new();
            for line in text.lines() {
                for name in defined(line) {
                    assert!(known.insert(name), "{script}: {name} is defined twice");
                }
                for name in used(&code(line)) {
                    assert!(
                        !shared.contains(name) || known.contains(name),
                        "{script}: `{line}` names {name} before any part defines it"
                    );
                }
            }
        }
    }

    /// A free key's acquisition returns before the line's and the lock's parts: none of their
    /// functions is made on the uncontended path.
    #[test]
    fn a_free_keys_acquisition_returns_before_the_lines_functions() {
        let (_, acquire) = TEXTS.iter().find(|(name, _)| *name == "acquire").unwrap();
        let fast_path = acquire.find("redis.call('EXISTS'").unwrap();
        for part in ["local function line_decide", "local function lock_decide"] {
            assert!(acquire.find(part).unwrap() > fast_path, "{part}");
        }
    }
}
