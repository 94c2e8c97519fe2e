//! The names of the two tables (and of the tables named after the lock table): the one input that reaches SQL text, so validated where it is
//! made. The statements and the DDL are both written for a [`TableNames`].

use crate::error::{LockError, Result};

pub(super) const DEFAULT_LOCK_TABLE: &str = "syncguard_locks";
pub(super) const DEFAULT_FENCE_TABLE: &str = "syncguard_fence_counters";
/// PostgreSQL truncates identifiers beyond 63 bytes; the longest derived names are the index
/// `idx_<lock table>_lock_id`, the semaphore table `<lock table>_semaphores` and the line's
/// index `<lock table>_line_ticket` (all 12 bytes of affixes; the tests check every derived
/// name).
const MAX_IDENTIFIER: usize = 63;
const LONGEST_INDEX_AFFIXES: usize = "idx_".len() + "_lock_id".len();

/// The lock table and the fence counter table. Names are lowercase SQL identifiers
/// (`[a-z_][a-z0-9_]*`, the lock table at most 51 bytes so that its index names fit), and the
/// two must differ: validated here, so nothing else can reach the SQL text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableNames {
    lock_table: String,
    fence_table: String,
}

impl Default for TableNames {
    fn default() -> Self {
        TableNames {
            lock_table: DEFAULT_LOCK_TABLE.to_owned(),
            fence_table: DEFAULT_FENCE_TABLE.to_owned(),
        }
    }
}

impl TableNames {
    /// Custom names; `InvalidArgument` unless both are valid and different.
    pub fn new(lock_table: &str, fence_table: &str) -> Result<TableNames> {
        validate_identifier(
            "lock table",
            lock_table,
            MAX_IDENTIFIER - LONGEST_INDEX_AFFIXES,
        )?;
        validate_identifier("fence table", fence_table, MAX_IDENTIFIER)?;
        if lock_table == fence_table {
            return Err(LockError::invalid_argument(
                "the lock table and the fence table must differ: cleaning up locks must never \
                 touch fence counters",
            ));
        }
        let tables = TableNames {
            lock_table: lock_table.to_owned(),
            fence_table: fence_table.to_owned(),
        };
        let derived = [
            tables.semaphore_table(),
            tables.permit_table(),
            tables.line_table(),
            tables.shared_table(),
        ];
        if derived.contains(&tables.fence_table) {
            return Err(LockError::invalid_argument(
                "the fence table must not be named after the lock table's semaphore, permit, \
                 line or shared table (<lock table>_semaphores, <lock table>_permits, \
                 <lock table>_line, <lock table>_shared)",
            ));
        }
        Ok(tables)
    }

    /// The lock table (default `syncguard_locks`).
    pub fn lock_table(&self) -> &str {
        &self.lock_table
    }

    /// The fence counter table (default `syncguard_fence_counters`).
    pub fn fence_table(&self) -> &str {
        &self.fence_table
    }

    /// The semaphore table: one row per semaphore ever used, holding its own fence counter
    /// (`<lock table>_semaphores`, default `syncguard_locks_semaphores`). Named after the lock
    /// table so that custom names need no third setting; never the fence counter table, whose
    /// counters belong to the keys' locks.
    pub fn semaphore_table(&self) -> String {
        format!("{}{SEMAPHORE_SUFFIX}", self.lock_table)
    }

    /// The permit table: one row per permit held (`<lock table>_permits`, default
    /// `syncguard_locks_permits`).
    pub fn permit_table(&self) -> String {
        format!("{}{PERMIT_SUFFIX}", self.lock_table)
    }

    /// The line table: one row per waiter's place in the line of a key's lock or semaphore
    /// (`<lock table>_line`, default `syncguard_locks_line`).
    pub fn line_table(&self) -> String {
        format!("{}{LINE_SUFFIX}", self.lock_table)
    }

    /// The shared-holder table: one row per shared hold (reader) of a key's lock, beside the
    /// lock record (`<lock table>_shared`, default `syncguard_locks_shared`).
    pub fn shared_table(&self) -> String {
        format!("{}{SHARED_SUFFIX}", self.lock_table)
    }
}

const SEMAPHORE_SUFFIX: &str = "_semaphores";
const PERMIT_SUFFIX: &str = "_permits";
const LINE_SUFFIX: &str = "_line";
const SHARED_SUFFIX: &str = "_shared";

fn validate_identifier(what: &str, name: &str, max_len: usize) -> Result<()> {
    let mut bytes = name.bytes();
    let well_formed = bytes
        .next()
        .is_some_and(|first| first.is_ascii_lowercase() || first == b'_')
        && bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
    if !well_formed || name.len() > max_len {
        return Err(LockError::invalid_argument(format!(
            "invalid {what} name: use a lowercase SQL identifier ([a-z_][a-z0-9_]*) of at most \
             {max_len} bytes"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_validated() {
        assert!(TableNames::new("app_locks", "app_fences").is_ok());
        assert!(TableNames::new("_x1", "_x2").is_ok());
        for (lock, fence) in [
            ("locks", "locks"),
            ("Locks", "fences"),
            ("1locks", "fences"),
            ("locks; DROP TABLE users", "fences"),
            ("locks", "fences\""),
            ("public.locks", "fences"),
            ("", "fences"),
            ("locks", ""),
            ("lócks", "fences"),
        ] {
            let err = TableNames::new(lock, fence).unwrap_err();
            assert_eq!(
                err.code(),
                crate::ErrorCode::InvalidArgument,
                "{lock:?} {fence:?}"
            );
        }
        assert!(TableNames::new(&"l".repeat(51), "f").is_ok());
        assert!(TableNames::new(&"l".repeat(52), "f").is_err());
        assert!(TableNames::new("l", &"f".repeat(63)).is_ok());
        assert!(TableNames::new("l", &"f".repeat(64)).is_err());
        assert!(TableNames::new("l", "l_permits").is_err());
        assert!(TableNames::new("l", "l_semaphores").is_err());
        assert!(TableNames::new("l", "l_line").is_err());
        assert!(TableNames::new("l", "l_shared").is_err());
    }

    /// Every name derived from the longest lock table fits PostgreSQL's 63 bytes (beyond, the
    /// server would silently truncate it, and two names could meet).
    #[test]
    fn derived_names_fit() {
        let tables = TableNames::new(&"l".repeat(51), "f").unwrap();
        let locks = tables.lock_table();
        for name in [
            tables.semaphore_table(),
            tables.permit_table(),
            format!("idx_{locks}_lock_id"),
            format!("idx_{locks}_expires"),
            format!("{locks}_released"),
            format!("{locks}_sem_pk"),
            format!("{locks}_permit_pk"),
            format!("{locks}_permit_exp"),
            tables.line_table(),
            format!("{locks}_line_pk"),
            format!("{locks}_line_ticket"),
            tables.shared_table(),
            format!("{locks}_shared_pk"),
            format!("{locks}_shared_exp"),
        ] {
            assert!(name.len() <= MAX_IDENTIFIER, "{name}");
        }
        assert_eq!(tables.semaphore_table().len(), MAX_IDENTIFIER - 1);
        let defaults = TableNames::default();
        assert_eq!(defaults.semaphore_table(), "syncguard_locks_semaphores");
        assert_eq!(defaults.permit_table(), "syncguard_locks_permits");
        assert_eq!(defaults.line_table(), "syncguard_locks_line");
        assert_eq!(defaults.shared_table(), "syncguard_locks_shared");
    }
}
