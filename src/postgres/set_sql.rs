//! The acquisition of several keys' locks, all or none (function only; on tables without it
//! the driver takes the keys one at a time with `acquire`). Its steps are the acquire
//! function's, written once for both (`lock_sql.rs`).
//!
//! The set's function (`Statements::acquire_all`) is one call, hence one statement and one
//! transaction (through a transaction-mode pooler too). It decides THE RULE of several keys as
//! [`admit_all`](crate::driver::admit_all) does, in this order:
//!
//! 1. It takes the advisory lock of every key of the set (the same lock, `hashtext` of the
//!    storage key, as the single-key acquisitions and the TypeScript SyncGuard take), in the
//!    order of the locks' numbers, each once: two sets that share keys take their common locks
//!    in one order, so they never wait for each other in a cycle (a single-key acquisition takes
//!    one lock only). Then no other acquirer of these keys runs until it ends, and each later
//!    step reads a fresh snapshot that sees every write of those before it.
//! 2. Key by key, in the set's order: reads the lock row (`held`: a live lock of another lock
//!    id, or a live reader; a row that is not a SyncGuard record ends the call, naming the key,
//!    with nothing taken), prunes the key's line of its expired places and finds the waiter's
//!    own place there ([`KeyLine::find`]). A key whose lock row already holds the lock id sent
//!    for it is this very call repeated by the pool (its answer was lost): admitted, as one
//!    key's acquisition answers it. A single attempt (`keep`, `ignore`) that finds a key held
//!    stops there.
//! 3. The waiter's one ticket for the whole wait: the lowest ticket of its places where it
//!    stands already (a request repeated, or retried after its answer was lost, finds them and
//!    keeps their ticket), else the one it carries (`$11`), else none yet. Then key by key,
//!    each key's line is decided ([`KeyLine::decide`]): where the waiter stands, it is judged by
//!    its place there; elsewhere, the places ordered by (ticket, place id) before (its ticket,
//!    its place id) are ahead — every place when it has no ticket yet, as behind the last ticket
//!    of every line.
//! 4. Every key admits: every key's fence counter is checked first (one no fence can follow
//!    refuses the set, naming its key, with nothing taken), then each key gets what a
//!    single-key acquisition writes (the waiter's place deleted, the fence counter, the lock
//!    row with its holder; the expiry from the server clock read once, so every lease of the
//!    set expires together).
//! 5. Else nothing is taken: a waiter stands on every key that refused it and every key where
//!    it stands already ([`KeyLine::stand`]): a new place takes the waiter's ticket; with none
//!    yet, the first draws the next one of the identity sequence, and every other new place
//!    takes it, so the waiter's places carry one ticket (a retry that meets a key newly held
//!    stands there with the ticket of its places elsewhere, never a second one). The answer
//!    gives the ticket back, and `places_ahead`: how many live places stand ahead of the
//!    waiter's own on the line where it stands furthest back ([`KeyLine::count_ahead`], the
//!    most over its keys). Then, now and then, expired places of any key are swept
//!    ([`KeyLine::sweep`]).

use postgres::types::Type;

use super::line_sql::{KeyLine, LINE_DECLARATIONS};
use super::lock_sql::{KeyArgs, LockSql};
use super::op::Op;
use super::record_sql::{NOW_MS, Quoted, acquire_types};

/// The set's acquire function's parameters (see `Statements::acquire_all`): the lock's, with
/// arrays of keys, lock ids, user keys and fence keys.
const ACQUIRE_ALL_TYPES: &[Type] = &acquire_types(
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
    Type::TEXT_ARRAY,
);

/// The set's acquire function (see the module docs).
pub(super) fn acquire_all(tables: &Quoted<'_>) -> Op {
    Op::steps(
        tables.names,
        "macquire",
        ACQUIRE_ALL_TYPES,
        "OUT lock_fences text[], OUT expires_at_ms bigint, OUT ticket bigint, \
         OUT bad_key text, OUT bad_counter bigint, OUT malformed_key text, OUT places_ahead bigint",
        String::new(),
        body(tables),
    )
    .function_only()
}

/// The body of the set's acquire function: `$1` storage keys, `$2` lock ids, `$3` ttl ms, `$4`
/// user keys, `$5` fence keys, `$6` largest fence, `$7` tolerance ms, `$8` holder, `$9` mode,
/// `$10` place id, `$11` ticket.
fn body(tables: &Quoted<'_>) -> String {
    let args = KeyArgs {
        key: "$1[i]",
        lock_id: "$2[i]",
        user_key: "$4[i]",
        fence_key: "$5[i]",
    };
    let key_line = KeyLine {
        line: &tables.line,
        kind: crate::driver::LeaseKind::Lock,
        key: args.key,
    };
    let lock_sql = LockSql { tables };
    let fences = &tables.fences;
    // The key's line is read once, in the first loop (pruned, the waiter's own place found),
    // because the ticket the second loop judges by is known only once every key has been
    // read: the lowest of the waiter's places (`standing`, kept with LEAST, which skips
    // NULLs: a simple expression, no query on the uncontended path).
    format!(
        "DECLARE\n  now_ms bigint;\n  held boolean;\n  own boolean;\n  malformed boolean;\n  \
         counter bigint;\n  taken text;\n  h integer;\n  i integer;\n  granted boolean := true;\n  \
         admits boolean[] := '{{}}';\n  mines bigint[] := '{{}}';\n  owns boolean[] := '{{}}';\n  \
         free_slots bigint[] := '{{}}';\n  probes boolean[] := '{{}}';\n  standing bigint;\n\
         {LINE_DECLARATIONS}\
         BEGIN\n\
         FOR h IN SELECT DISTINCT hashtext(k.k) FROM unnest($1) AS k(k) ORDER BY 1 LOOP\n\
         PERFORM pg_advisory_xact_lock(h);\n\
         END LOOP;\n\
         now_ms := {NOW_MS};\n\
         FOR i IN 1 .. cardinality($1) LOOP\n\
         {read}\
         IF malformed THEN malformed_key := $4[i]; RETURN; END IF;\n\
         slots := CASE WHEN held THEN 0 ELSE 1 END;\n\
         mine := NULL;\n\
         IF own IS NOT TRUE THEN\n\
         IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;\n\
         {find}\
         END IF;\n\
         owns := owns || (own IS TRUE);\n\
         free_slots := free_slots || slots;\n\
         probes := probes || queued;\n\
         mines := mines || mine;\n\
         standing := LEAST(standing, mine);\n\
         END LOOP;\n\
         line_ticket := COALESCE(standing, $11);\n\
         FOR i IN 1 .. cardinality($1) LOOP\n\
         IF owns[i] THEN\n\
         admitted := true;\n\
         ELSE\n\
         slots := free_slots[i];\n\
         queued := probes[i];\n\
         mine := mines[i];\n\
         {decide}\
         END IF;\n\
         admits := admits || admitted;\n\
         granted := granted AND admitted;\n\
         END LOOP;\n\
         IF granted THEN\n\
         FOR i IN 1 .. cardinality($1) LOOP\n\
         SELECT f.fence INTO counter FROM {fences} f WHERE f.fence_key = $5[i];\n\
         IF counter < 0 OR counter >= $6 THEN\n\
         bad_key := $4[i];\n\
         bad_counter := counter;\n\
         RETURN;\n\
         END IF;\n\
         END LOOP;\n\
         lock_fences := '{{}}';\n\
         FOR i IN 1 .. cardinality($1) LOOP\n\
         mine := mines[i];\n\
         IF $9 = 'wait' THEN\n\
         {leave}\
         END IF;\n\
         {draw_fence}\
         taken := NULL;\n\
         {write_lock}\
         IF counter IS NULL OR taken IS NULL THEN\n\
         RAISE EXCEPTION USING ERRCODE = 'serialization_failure',\n\
         MESSAGE = 'a key of the set changed hands while it was taken: nothing was taken';\n\
         END IF;\n\
         lock_fences := lock_fences || taken;\n\
         END LOOP;\n\
         RETURN;\n\
         END IF;\n\
         IF $9 = 'wait' THEN\n\
         FOR i IN 1 .. cardinality($1) LOOP\n\
         IF NOT admits[i] OR mines[i] IS NOT NULL THEN\n\
         mine := mines[i];\n\
         {stand}\
         {count_ahead}\
         END IF;\n\
         END LOOP;\n\
         ticket := line_ticket;\n\
         {sweep}\
         END IF;\n\
         END",
        read = lock_sql.read(&args),
        find = key_line.find(),
        decide = key_line.decide(),
        sweep = key_line.sweep(),
        leave = key_line.leave(),
        draw_fence = lock_sql.draw_fence(&args),
        write_lock = lock_sql.write_lock(&args, "taken, expires_at_ms"),
        stand = key_line.stand(),
        count_ahead = key_line.count_ahead(),
    )
}
