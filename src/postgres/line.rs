//! Reading the line of a key's lock or semaphore and leaving it, on PostgreSQL: one statement
//! each, through the server functions `Statements::line` and `Statements::leave_line` (how the
//! line is stored and decided: `line_sql.rs`). Without this version's functions there is no
//! line: it reads as empty and leaving it does nothing.

use super::client::Param;
use super::driver::{PostgresBackend, function_is_missing};
use super::line_sql::line_kind;
use super::rows::storage_key_of;
use super::statements::Op;
use crate::driver::{Key, LeaseKind, LockId, PlaceRecord, TIME_TOLERANCE_MS};
use crate::error::{LockError, Result};

impl PostgresBackend {
    /// The live places of the line of `key`'s lock or semaphore, in ticket order; none on
    /// tables without the line.
    pub(super) fn places(&self, key: &Key, kind: LeaseKind) -> Result<Vec<PlaceRecord>> {
        let storage_key = storage_key_of(key)?;
        let params = vec![
            storage_key.as_str().into(),
            line_kind(kind).into(),
            TIME_TOLERANCE_MS.into(),
        ];
        let Some(rows) = self.call_line_function(&self.statements.line, params)? else {
            return Ok(Vec::new());
        };
        rows.iter()
            .map(|row| {
                let column =
                    |name: &str| LockError::internal(format!("the line answered no usable {name}"));
                let ticket: i64 = row.try_get("ticket").map_err(|_| column("ticket"))?;
                Ok(PlaceRecord {
                    place_id: row.try_get("place_id").map_err(|_| column("place_id"))?,
                    ticket: u64::try_from(ticket).map_err(|_| column("ticket"))?,
                    expires_at_ms: row
                        .try_get("expires_at_ms")
                        .map_err(|_| column("expires_at_ms"))?,
                    holder: row.try_get("holder").map_err(|_| column("holder"))?,
                    shared: row.try_get("shared").map_err(|_| column("shared"))?,
                })
            })
            .collect()
    }

    /// Removes the place `place` from the line of `key`'s lock or semaphore (one `DELETE`);
    /// nothing on tables without the line.
    pub(super) fn leave(&self, key: &Key, kind: LeaseKind, place: &LockId) -> Result<()> {
        let storage_key = storage_key_of(key)?;
        let params = vec![
            storage_key.as_str().into(),
            line_kind(kind).into(),
            place.as_str().into(),
        ];
        self.call_line_function(&self.statements.leave_line, params)
            .map(drop)
    }

    /// Calls a function of the line, `op`; `None` when this version's functions are missing
    /// (known so already, or found so now): then there is no line.
    fn call_line_function(
        &self,
        op: &Op,
        params: Vec<Param>,
    ) -> Result<Option<Vec<postgres::Row>>> {
        if self.functions_known_missing() {
            return Ok(None);
        }
        match self.connections.query(&op.call, &params) {
            Err(error) if function_is_missing(op, &error) => {
                self.functions_missing();
                Ok(None)
            }
            result => result.map(Some),
        }
    }
}
