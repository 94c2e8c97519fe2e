//! An operator's break on PostgreSQL ([`Driver::break_leases`]): one statement of
//! `break_sql.rs` for the kind, with marker lock ids drawn here; sent again while it answers
//! that it did nothing (a grant committed while it waited, more marker lock ids needed, a
//! deadlock with a renewal taking the same rows in another order); its rows read as the
//! records removed and written.
//!
//! [`Driver::break_leases`]: crate::driver::Driver::break_leases

use postgres::Row;
use postgres::error::SqlState;

use super::acquire::bad_counter_error;
use super::client::Param;
use super::driver::{Feature, PostgresBackend};
use super::errors::ServerError;
use super::leases::lacks_holder;
use super::records::lock_record;
use super::rows::{column, fence_key_of, not_a_record, storage_key_of};
use super::statements::Sql;
use crate::driver::{
    BreakDelay, BreakOrder, Broken, FENCE_MAX, Key, LeaseKind, LockRecord, TIME_TOLERANCE_MS,
    marker_lock_id,
};
use crate::error::{ErrorCode, LockError, Result};

/// How many times a break is sent before it gives up on a key whose holds keep changing.
const ATTEMPTS: usize = 10;

/// How many marker lock ids a break of shared holds or permits sends at first, and more than
/// the count a statement asks for, in case holds came meanwhile: most keys have a few.
const SPARE_MARKER_IDS: usize = 4;

/// What one break statement answered.
enum Answer {
    /// Done: the holders removed and the markers written.
    Done(Broken),
    /// Nothing done: a grant committed while it waited.
    Stale,
    /// Nothing done: it may need this many marker lock ids.
    Needed(usize),
}

impl PostgresBackend {
    /// Breaks what `order` names: one statement, sent again while it did nothing (see the
    /// module docs).
    pub(super) fn break_holders(&self, order: &BreakOrder<'_>) -> Result<Broken> {
        let storage_key = storage_key_of(order.key)?;
        let fence_key = fence_key_of(&storage_key)?;
        let delay_ms = match order.delay {
            BreakDelay::For(ttl) => Some(ttl.as_millis()),
            BreakDelay::RestOfLease | BreakDelay::None => None,
        };
        // No marker lock ids: no markers.
        let mut marker_ids = match (order.delay, order.kind) {
            (BreakDelay::None, _) => 0,
            (_, LeaseKind::Lock) => 1,
            (_, LeaseKind::Shared | LeaseKind::Permit) => SPARE_MARKER_IDS,
        };
        let mut with_holder = true;
        for _ in 0..ATTEMPTS {
            let ids: Vec<String> = (0..marker_ids)
                .map(|_| marker_lock_id().into_string())
                .collect();
            let params: Vec<Param> = vec![
                storage_key.as_str().into(),
                order.key.as_str().into(),
                fence_key.as_str().into(),
                order.lock_id.map(|id| id.as_str()).into(),
                delay_ms.into(),
                order.note.as_str().into(),
                ids.into(),
                TIME_TOLERANCE_MS.into(),
                (FENCE_MAX as i64).into(),
            ];
            let rows = match self
                .connections
                .query(self.break_sql(order.kind, with_holder), &params)
            {
                Ok(rows) => rows,
                // Refused before it ran: tables the TypeScript SyncGuard made.
                Err(error)
                    if order.kind == LeaseKind::Lock && with_holder && lacks_holder(&error) =>
                {
                    with_holder = false;
                    continue;
                }
                // Rolled back: nothing was done.
                Err(error)
                    if ServerError::state_of(&error) == Some(&SqlState::T_R_DEADLOCK_DETECTED) =>
                {
                    continue;
                }
                Err(error) => return Err(self.break_refused(order.kind, error)),
            };
            match self.answer(&rows, order.key)? {
                Answer::Done(broken) => return Ok(broken),
                Answer::Stale => {}
                Answer::Needed(needed) => marker_ids = needed + SPARE_MARKER_IDS,
            }
        }
        Err(LockError::new(
            ErrorCode::ServiceUnavailable,
            format!(
                "the holders of this key changed during each of {ATTEMPTS} attempts to break \
                 them; nothing was broken: try again"
            ),
        )
        .with_key(order.key.as_str()))
    }

    /// The break statement of `kind` (for a lock: on tables `with_holder` column or without).
    fn break_sql(&self, kind: LeaseKind, with_holder: bool) -> &Sql {
        let s = &self.statements;
        match kind {
            LeaseKind::Lock if with_holder => &s.break_lock,
            LeaseKind::Lock => &s.break_lock_without_holder,
            LeaseKind::Shared => &s.break_shared,
            LeaseKind::Permit => &s.break_permits,
        }
    }

    /// A break's `error`; for shared holds and permits, on tables without theirs, the refusal
    /// their other calls make there (`InvalidArgument`, run setup).
    fn break_refused(&self, kind: LeaseKind, error: LockError) -> LockError {
        match kind {
            LeaseKind::Lock => error,
            LeaseKind::Shared => self.refused(Feature::SharedHolds, None, error),
            LeaseKind::Permit => self.refused(Feature::Semaphores, None, error),
        }
    }

    /// A break statement's rows, for `key`.
    fn answer(&self, rows: &[Row], key: &Key) -> Result<Answer> {
        let mut broken = Broken::default();
        let mut answer = None;
        for row in rows {
            match column::<String>(row, "role")?.as_str() {
                "holder" => {
                    broken
                        .holders
                        .push(lock_record(row, &self.tables, Some(key.as_str()))?)
                }
                "marker" => {
                    broken
                        .markers
                        .push(lock_record(row, &self.tables, Some(key.as_str()))?)
                }
                _ => answer = Some(self.status(row, key)?),
            }
        }
        let Some(answer) = answer else {
            return Err(LockError::internal("the break answered no status"));
        };
        Ok(match answer {
            Some(answer) => answer,
            None => {
                in_fence_order(&mut broken.holders);
                in_fence_order(&mut broken.markers);
                Answer::Done(broken)
            }
        })
    }

    /// A break's `status` row: `Some` when it did nothing and may be sent again; an error when
    /// the key's row is not a record or its counter can be followed by no fence.
    fn status(&self, row: &Row, key: &Key) -> Result<Option<Answer>> {
        if column::<Option<bool>>(row, "malformed")? == Some(true) {
            return Err(not_a_record(&self.tables, key.as_str()));
        }
        if let Some(counter) = column::<Option<i64>>(row, "bad_counter")? {
            return Err(bad_counter_error(counter).with_key(key.as_str()));
        }
        if column::<Option<bool>>(row, "repeated")? == Some(true) {
            return Err(LockError::new(
                ErrorCode::ServiceUnavailable,
                "the break was carried out, but its answer was lost with its connection (the \
                 call sent again found the markers it wrote): the broken holders are gone and \
                 markers hold their places; `syncguard status` shows them",
            )
            .with_key(key.as_str()));
        }
        if column::<Option<bool>>(row, "stale")? == Some(true) {
            return Ok(Some(Answer::Stale));
        }
        let needed = column::<Option<i64>>(row, "needed")?;
        Ok(needed.map(|needed| Answer::Needed(usize::try_from(needed).unwrap_or(0))))
    }
}

/// Sorts `records` by fence, as the in-memory store answers them.
fn in_fence_order(records: &mut [LockRecord]) {
    records.sort_by_key(|record| record.fence);
}
