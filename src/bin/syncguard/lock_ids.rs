//! The lock ids `release` and `extend` act on: `--lock-id` (which may repeat), or the lines
//! `acquire` printed (`--acquired`: one JSON object per key). Every id is tried, whatever
//! became of the others; the answers are put together here, once for both commands.
//!
//! One id is the command as it always was (same output, same exit codes). Several: exit 0 when
//! each lease was there, 1 when some were not (their positions, from 1, in `"notHeld"`), and,
//! when the backend failed on some, one error naming each of them by position (never the id,
//! which releases the lock), with the first failure's exit code.

use serde_json::{Value, json};
use syncguard::LockError;

use crate::input;
use crate::outcome::Outcome;

/// The lock ids of one `release` or `extend`, checked.
pub struct LockIds(Vec<String>);

impl LockIds {
    /// From `--lock-id`s or `--acquired`'s text (clap gives one of them): each must have the
    /// shape of a lock id, and `--acquired` must be what `acquire` prints for locks it took.
    pub fn of(lock_ids: Vec<String>, acquired: Option<&str>) -> syncguard::Result<LockIds> {
        let ids = match acquired {
            Some(text) => from_acquired(text)?,
            None => lock_ids,
        };
        if ids.is_empty() {
            return Err(LockError::invalid_argument(
                "no lock id: give --lock-id or --acquired",
            ));
        }
        for id in &ids {
            input::lock_id(id)?;
        }
        Ok(LockIds(ids))
    }

    /// The one id, when there is one only (the command then answers as it always did).
    pub fn single(&self) -> Option<&str> {
        match self.0.as_slice() {
            [id] => Some(id),
            _ => None,
        }
    }

    /// `act` on each id in turn, every one tried; what they came to, for several ids:
    /// `Ok((answers, not_held))` — each `Some` answer, and the positions (from 1) of the leases
    /// that were not held — or the error that names every failure.
    pub fn each<T>(
        &self,
        what: &str,
        mut act: impl FnMut(&str) -> syncguard::Result<Option<T>>,
    ) -> syncguard::Result<(Vec<T>, Vec<usize>)> {
        let count = self.0.len();
        let mut answers = Vec::with_capacity(count);
        let mut not_held = Vec::new();
        let mut failed: Vec<(usize, LockError)> = Vec::new();
        for (at, id) in self.0.iter().enumerate() {
            match act(id) {
                Ok(Some(answer)) => answers.push(answer),
                Ok(None) => not_held.push(at + 1),
                Err(error) => failed.push((at + 1, error)),
            }
        }
        let Some((_, first)) = failed.first() else {
            return Ok((answers, not_held));
        };
        let each: Vec<String> = failed
            .iter()
            .map(|(at, error)| format!("lock id {at}: {}", error.message()))
            .collect();
        Err(LockError::new(
            first.code(),
            format!(
                "{} of the {count} lock ids could not be {what} ({}); the others were tried",
                failed.len(),
                each.join("; ")
            ),
        ))
    }
}

/// `release`/`extend` of several lock ids, every one tried: `all_held` (exit 0) when each lease
/// was there, else `{"ok":false,"notHeld":[positions from 1]}` (exit 1).
pub fn several_answered(all_held: Value, not_held: Vec<usize>) -> Outcome {
    if not_held.is_empty() {
        Outcome::Printed(all_held, 0)
    } else {
        Outcome::Printed(json!({ "ok": false, "notHeld": not_held }), 1)
    }
}

/// What `--acquired` may be: `acquire`'s lines, each `{"ok":true,"lockId":…}` for a lock (a
/// permit's or shared hold's line needs `--permit`/`--shared --key K` and `--lock-id`).
fn from_acquired(text: &str) -> syncguard::Result<Vec<String>> {
    let not_acquire = |line: usize, why: &str| {
        LockError::invalid_argument(format!(
            "--acquired: line {line} is not what acquire prints for a lock it took: {why}"
        ))
    };
    let mut ids = Vec::new();
    for (at, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let value: Value =
            serde_json::from_str(line).map_err(|_| not_acquire(at + 1, "not a JSON object"))?;
        if value["ok"] != json!(true) {
            return Err(not_acquire(at + 1, "no \"ok\":true (acquire took nothing)"));
        }
        if value.get("permits").is_some() || value.get("shared").is_some() {
            return Err(not_acquire(
                at + 1,
                "a permit or a shared hold: give --permit or --shared, --key and --lock-id",
            ));
        }
        let id = value["lockId"]
            .as_str()
            .ok_or_else(|| not_acquire(at + 1, "no \"lockId\""))?;
        ids.push(id.to_owned());
    }
    Ok(ids)
}

#[cfg(test)]
mod tests {
    use super::*;
    use syncguard::ErrorCode;

    const A: &str = "AAAAAAAAAAAAAAAAAAAAAA";
    const B: &str = "BBBBBBBBBBBBBBBBBBBBBB";

    #[test]
    fn acquire_lines_give_their_lock_ids_in_order() {
        let printed = format!(
            "{{\"ok\":true,\"key\":\"a\",\"lockId\":\"{A}\"}}\n{{\"ok\":true,\"key\":\"b\",\"lockId\":\"{B}\"}}\n"
        );
        let ids = LockIds::of(Vec::new(), Some(&printed)).unwrap();
        assert_eq!(ids.0, [A, B]);
        assert_eq!(ids.single(), None);
        let one = LockIds::of(vec![A.to_owned()], None).unwrap();
        assert_eq!(one.single(), Some(A));
    }

    #[test]
    fn anything_else_is_bad_usage() {
        for printed in [
            "",
            "not json",
            "{\"ok\":false,\"reason\":\"locked\"}",
            &format!("{{\"ok\":true,\"lockId\":\"{A}\",\"permits\":3}}"),
            "{\"ok\":true,\"lockId\":\"short\"}",
        ] {
            let refused = LockIds::of(Vec::new(), Some(printed)).err();
            assert_eq!(
                refused.map(|error| error.code()),
                Some(ErrorCode::InvalidArgument),
                "{printed}"
            );
        }
    }

    #[test]
    fn every_id_is_tried_and_failures_are_named_together() {
        let ids = LockIds::of(vec![A.to_owned(), B.to_owned(), A.to_owned()], None).unwrap();
        let mut tried = 0;
        let all = ids.each("released", |id| {
            tried += 1;
            Ok((id == A).then_some(()))
        });
        assert_eq!(tried, 3);
        assert_eq!(
            all.ok()
                .map(|(answers, not_held)| (answers.len(), not_held)),
            Some((2, vec![2]))
        );
        let failed = ids
            .each("released", |id| {
                if id == A {
                    Err(LockError::internal("down"))
                } else {
                    Ok(Some(()))
                }
            })
            .unwrap_err();
        assert_eq!(failed.code(), ErrorCode::Internal);
        assert!(
            failed.message().starts_with(
                "2 of the 3 lock ids could not be released (lock id 1: down; lock id 3: down)"
            ),
            "{failed}"
        );
        assert!(!failed.message().contains(A));
    }
}
