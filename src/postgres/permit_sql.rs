//! A semaphore's acquire function (`Statements::permit_acquire`); its release, renewal and
//! readings are `holds_sql.rs`'s, as the shared holds' are.
//!
//! A semaphore's permits live in tables of their own (`<lock table>_permits`, one row per
//! permit, and `<lock table>_semaphores`, one row per semaphore with its own fence counter),
//! never in the lock table or the fence counter table, so the lock on a key and the semaphore
//! on it never see each other. Its operations exist only as server functions: counting the
//! live permits is only right once every other acquirer of the semaphore is shut out, and a
//! single statement reads one snapshot taken before it waited for that. So acquire, step by
//! step: makes sure the semaphore row exists (`INSERT … ON CONFLICT DO NOTHING`, which waits
//! for a concurrent insert of it), locks it (`SELECT … FOR UPDATE`: acquirers of one semaphore
//! take turns here, through a pooler too — it is held until the call's transaction commits),
//! reads the clock, deletes the expired permits, counts the others (a fresh snapshot: it sees
//! every permit granted by an acquirer that held the row lock before), and grants a permit
//! only when fewer than the caller's N are held, with the counter plus one as its fence. A
//! permit already held under the caller's lock id is this very call made again (the pool
//! repeats a call once when its connection died before the answer came, and a lock id is
//! drawn afresh for every acquisition): it is answered as granted, with its fence, its expiry
//! renewed to the caller's TTL from now — as the lock's acquire renews its own lock id's row —
//! instead of being counted as another holder's (the semaphore would look full of its own
//! permit) or inserted a second time (a duplicate key). Between deleting its key's expired
//! permits and counting, one acquisition in `SWEEP_EVERY` (drawn at random) also
//! deletes a few permits of any key that expired more than a minute ago (`sweep_sql.rs`:
//! `SWEEP_AFTER_MS`; the oldest first, at most `SWEEP_BATCH`, found through the
//! permit table's index on `expires_at_ms`), so that a semaphore whose key is never used again
//! (one per job id) leaves no permit row behind; its semaphore row stays, as a lock's fence
//! counter row does, for it holds the fence counter. Those rows are taken `FOR UPDATE SKIP
//! LOCKED`: the acquisition never waits for them, and waits for nothing after taking them (the
//! count only reads, the semaphore row is its own already, and so is the key and lock id of a
//! permit it inserts), so they close no cycle of waits — an acquirer of their own key, or a
//! release, that wants one waits for this call to end and then finds it gone. Renewals never
//! want them: they touch only the permits live by their own statement's clock. Each
//! table is first locked in the strongest mode the call takes on it (`ROW EXCLUSIVE`, by the
//! first `INSERT` or `DELETE`), so no call waits to upgrade a lock it already holds. Release
//! deletes the permit by key and lock id and announces it like a lock's release; renewal
//! extends the live permits named, in one statement, and leaves the expired ones to the next
//! acquisition or release (deleting them too, it could take two rows an acquirer is deleting in
//! the other order, and deadlock with it); neither takes the semaphore row, so a release never
//! waits for acquirers. Listing the permits under a key prefix only reads, like the lock
//! listing: the live rows of the permit table whose user key starts with it, by user key
//! (`COLLATE "C"`) then fence, one more than the limit. Without the functions
//! (tables set up by an older syncguard or by the TypeScript SyncGuard) the call is refused
//! with `InvalidArgument`, saying to run `syncguard setup`.
//!

use postgres::types::Type;

use super::holds_sql;
use super::line_sql::{LINE_DECLARATIONS, admit_by_line, line_probe};
use super::op::Op;
use super::record_sql::{NOW_MS, Quoted, acquire_types};
use super::sweep_sql::sweep_expired;
use crate::driver::LeaseKind;

/// The permit acquire function's parameters (see `Statements::permit_acquire`): the lock's,
/// but `$5` is the number of permits.
const PERMIT_ACQUIRE_TYPES: &[Type] =
    &acquire_types(Type::TEXT, Type::TEXT, Type::TEXT, Type::INT8);

/// The acquire function of a semaphore's permit (function only; see the module docs).
pub(super) fn acquire(tables: &Quoted<'_>) -> Op {
    let (semaphores, permits, line) = (&tables.semaphores, &tables.permits, &tables.line);
    Op::steps(
        tables.names,
        "pacquire",
        PERMIT_ACQUIRE_TYPES,
        "OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT places_ahead bigint",
        String::new(),
        format!(
            "DECLARE\n  now_ms bigint;\n  counter bigint;\n  held bigint;\n\
             {LINE_DECLARATIONS}\
             BEGIN\n\
             INSERT INTO {semaphores} AS s (key, fence, user_key) VALUES ($1, 0, $4)\n\
                 ON CONFLICT (key) DO NOTHING;\n\
             SELECT s.fence INTO counter FROM {semaphores} s WHERE s.key = $1 FOR UPDATE;\n\
             now_ms := {NOW_MS};\n\
             {sweep}\
             SELECT count(*), min(p.fence) FILTER (WHERE p.lock_id = $2), {probe}\n\
                 INTO held, fence, queued FROM {permits} p WHERE p.key = $1;\n\
             {repeat}\
             {line_rule}\
             IF counter < 0 OR counter >= $6 THEN bad_counter := counter; RETURN; END IF;\n\
             counter := counter + 1;\n\
             UPDATE {semaphores} s SET fence = counter WHERE s.key = $1;\n\
             {grant}\
             END",
            sweep = sweep_expired(permits),
            probe = line_probe(line, LeaseKind::Permit, "$1"),
            repeat = holds_sql::answer_repeat(permits, "p"),
            line_rule = admit_by_line(line, LeaseKind::Permit, "$5 - held"),
            grant = holds_sql::grant(permits, "lpad(counter::text, 15, '0')"),
        ),
    )
    .function_only()
}
