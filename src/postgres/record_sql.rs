//! What every statement is written with: the tables of one backend as SQL names them
//! ([`Quoted`]), the server's clock ([`NOW_MS`]) and the rules for a lock row ([`sound`],
//! [`holder_of`]).
//!
//! Time is the server's `clock_timestamp()` in whole milliseconds, read once per statement.

use postgres::types::Type;

use super::tables::TableNames;

/// The server's clock in whole milliseconds.
pub(super) const NOW_MS: &str = "floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint";

/// The columns of a lock record with its holder description, as the functions that read
/// records answer them (`RETURNS TABLE`).
pub(super) const ROW_COLUMNS: &str = "key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,\n\
     fence text, user_key text, holder text";

/// The parameters of an acquire function, the kind's first: `$1` storage key, `$2` lock id,
/// `$4` user key and `$5` (`fifth`) fence key (text for one key, text[] for a set; a
/// semaphore's `$5` is its number of permits); then those every acquire function takes: `$3`
/// ttl ms, `$6` largest fence, `$7` tolerance ms, `$8` holder description, `$9` line mode,
/// `$10` place id, `$11` ticket.
pub(super) const fn acquire_types(
    key: Type,
    lock_id: Type,
    user_key: Type,
    fifth: Type,
) -> [Type; 11] {
    [
        key,
        lock_id,
        Type::INT8,
        user_key,
        fifth,
        Type::INT8,
        Type::INT8,
        Type::TEXT,
        Type::TEXT,
        Type::TEXT,
        Type::INT8,
    ]
}

/// The tables of one backend, quoted as the statements name them (the names are validated
/// identifiers), and the release channel.
pub(super) struct Quoted<'a> {
    /// The names the functions are named after (the lock table's).
    pub names: &'a TableNames,
    pub locks: String,
    pub fences: String,
    pub semaphores: String,
    pub permits: String,
    pub shared: String,
    pub line: String,
    /// The channel releases are announced on ([`release_channel`]; not quoted: a payload).
    pub released: String,
    /// [`sound`] of the lock row `l`.
    pub sound_l: String,
}

impl Quoted<'_> {
    pub fn new(names: &TableNames) -> Quoted<'_> {
        let quote = |table: &str| format!("\"{table}\"");
        Quoted {
            names,
            locks: quote(names.lock_table()),
            fences: quote(names.fence_table()),
            semaphores: quote(&names.semaphore_table()),
            permits: quote(&names.permit_table()),
            shared: quote(&names.shared_table()),
            line: quote(&names.line_table()),
            released: release_channel(names),
            sound_l: sound("l"),
        }
    }
}

/// The channel releases are announced on (`NOTIFY`, with the user key as payload): the lock
/// table's name and `_released`, at most 60 bytes.
pub(crate) fn release_channel(tables: &TableNames) -> String {
    format!("{}_released", tables.lock_table())
}

/// The holder description of the row `l`, if it was written for the lock the row holds now: the
/// `holder` column holds that lock's id, a space, and the description. The TypeScript
/// SyncGuard's acquisition leaves the column as it was when it takes a key over from an expired
/// lock of ours (it writes only the columns it names): that description is another lock's, and
/// reads as none.
pub(super) fn holder_of(l: &str) -> String {
    format!(
        "CASE WHEN left({l}.holder, {id_and_space}) = {l}.lock_id || ' ' \
         THEN substr({l}.holder, {description}) END",
        id_and_space = crate::driver::LOCK_ID_LENGTH + 1,
        description = crate::driver::LOCK_ID_LENGTH + 2,
    )
}

/// Whether the row `l` is a SyncGuard lock record: a fence of 15 digits (not all zero), a lock
/// id of 22 base64url characters, no NULLs. The same rule as the decoding in Rust
/// (`lock_record`). A row that is not is never taken over, renewed, released or swept: every
/// operation reports it (`malformed` / `malformed_key` columns), as an `Internal` error.
pub(super) fn sound(l: &str) -> String {
    format!(
        "({l}.fence ~ '^[0-9]{{15}}$' AND {l}.fence <> '000000000000000' \
         AND {l}.lock_id ~ '^[A-Za-z0-9_-]{{22}}$' AND {l}.expires_at_ms IS NOT NULL \
         AND {l}.acquired_at_ms IS NOT NULL AND {l}.user_key IS NOT NULL) IS TRUE"
    )
}
