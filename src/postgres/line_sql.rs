//! The line of a key's lock or semaphore on PostgreSQL (DESIGN §12, [`crate::line`]): one table
//! beside the lock and permit tables, `<lock table>_line(key, kind, place_id, ticket,
//! expires_at_ms, holder)`, keyed by `(key, kind, place_id)`, with an index on `(key, kind,
//! ticket)`. `ticket` is an identity column: drawn from a sequence at insertion, so a new place
//! goes behind every place of its line (the sequence never goes back), and the order of
//! tickets is the order the places reached the server. A waiter of several keys carries one
//! ticket to every key ([`Line::WaitAt`]): its new places are inserted with that ticket
//! (`OVERRIDING SYSTEM VALUE`), and places stand in order of (ticket, place id), the place id in
//! byte order (`COLLATE "C"`), wherever a line is decided or read. Such a ticket was drawn from
//! the same sequence, so the sequence is past it already: the line's last ticket is at least
//! it, as the rule asks, without a write.
//!
//! THE RULE is decided by the acquire function (locks) and the permit acquire function, in the
//! transaction that writes the lock or the permit, after it has shut out every other acquirer
//! of the key: the advisory lock for a lock, the semaphore's row lock for a permit. So the
//! line of a key's lock (or semaphore) is only ever changed by one acquisition at a time, and
//! each step below reads a fresh snapshot taken after that (READ COMMITTED, a volatile
//! function): it sees every place the acquirers before it wrote. The steps
//! ([`admit_by_line`] for one key; [`KeyLine`] holds them for the set's function too, which
//! decides every key before it stands or leaves anywhere: `lock_sql.rs`):
//!
//! 1. `free` is known (the lock: 1 unless a live lock of another lock id exists; a semaphore:
//!    its permits less the live ones). A single attempt or a barging one that finds no slot
//!    free stops here, as before the line.
//! 2. One index probe, made in the statement that reads the key's lock (or counts its
//!    permits) anyway ([`line_probe`]): is any place of this line stored? If not, nothing is
//!    pruned or counted — an acquisition that finds the key free and the line empty runs no
//!    statement and writes nothing more than before the line.
//! 3. Otherwise one statement reads the line ([`KeyLine::survey`]; the set's function reads it
//!    in the steps [`KeyLine::find`] and [`KeyLine::decide`], for it knows the ticket it judges
//!    by only once every key was read): the waiter's own live place, the live places ahead of
//!    it, and whether any place expired (`expires_at_ms <= now - tolerance`, the complement of
//!    liveness). A waiter that stands in the line already is judged where it stands, whatever
//!    ticket it carries (a retry whose answer was lost carries none): its own place is never
//!    ahead of it, and the places ahead are those before (its place's ticket, its place id).
//!    One that does not stand there is judged by the ticket it carries, and, with none (a
//!    newcomer) or for a single attempt, every live place is ahead.
//! 4. A waiter granted leaves the line: its place and the expired ones are deleted in one
//!    statement, run only when there is one to delete. One refused first prunes the expired
//!    places (when there are any), then takes a place (with the ticket it carries, else at the
//!    back with a new one) or, in line already, keeps its ticket and renews it for
//!    [`PLACE_TTL`], its holder text updated — unless it was renewed within the last
//!    [`PLACE_RENEWAL`](crate::line::PLACE_RENEWAL) with the same holder text: then no
//!    statement is run, so a refused attempt commits no change (and flushes no WAL) most of
//!    the time. The place id is the primary key: a repeated request is one place. A refused
//!    waiter is answered how many live places stand ahead of its place (`places_ahead`, as the
//!    survey counted them: a new place goes behind every place read); an attempt that took no
//!    place, NULL.
//! 5. A refused waiter, once it stands, sometimes deletes a few places of any key that expired
//!    long ago ([`KeyLine::sweep`]): the places of keys nobody asks for again (a killed waiter
//!    of a per-job key) do not stay forever, and the uncontended path runs nothing more.
//!
//! The lock's acquire function tries the key's advisory lock first, and when another
//! acquisition of the key holds it (a release woke every waiter of the key at once), reads the
//! lock row and the line without it: an attempt refused with nothing to write (a single one,
//! or a waiter whose place stands fresh) answers at once instead of queueing for the lock
//! behind the others ([`refuse_unlocked`]); every other one takes the lock and decides on what
//! it reads then.
//!
//! A repeat of an acquisition that was granted (the lock row already holds its lock id, or a
//! permit of its lock id is held) is answered as before the line, without it: the grant it
//! repeats already passed the line.
//!
//! Reading the line and leaving it are one statement each, through their functions (a `SELECT`
//! of the live places by ticket; a `DELETE` of one place). On tables without this version's
//! functions (set up by the TypeScript SyncGuard or an earlier syncguard) there is no line:
//! acquisitions go inline and barge, the line reads as empty and leaving it does nothing; the
//! backend says so once in its log (`PostgresBackend::functions_missing`).

use postgres::types::Type;

use crate::driver::{LeaseKind, Line, PLACE_TTL};
use crate::line::PLACE_FRESH_MS;

use super::op::Op;
use super::record_sql::{NOW_MS, Quoted};
use super::sweep_sql::sweep_long_expired;

/// The `kind` column of a line: a key's lock and its semaphore have a line each.
pub(super) fn line_kind(kind: LeaseKind) -> &'static str {
    match kind {
        LeaseKind::Lock | LeaseKind::Shared => "lock",
        LeaseKind::Permit => "permit",
    }
}

/// The acquire functions' `$9` (the mode: `ignore`, `keep` or `wait`), `$10` (the place id,
/// NULL unless waiting) and `$11` (the ticket the waiter carries, NULL unless [`Line::WaitAt`]).
pub(super) fn line_params(line: Line<'_>) -> (&'static str, Option<&str>, Option<i64>) {
    let ticket = line
        .ticket()
        .map(|ticket| i64::try_from(ticket).unwrap_or(i64::MAX));
    match line {
        Line::Ignore => ("ignore", None, None),
        Line::Keep => ("keep", None, None),
        Line::Wait(place) | Line::WaitAt(place, _) => ("wait", Some(place.as_str()), ticket),
    }
}

/// The variables [`admit_by_line`] uses, for the `DECLARE` of the function it is part of.
/// `line_ticket` is the waiter's ticket: `$11` (a set's: the ticket of its places where it
/// stands already, else `$11`), or the one its first new place drew; `judged_at` the ticket it
/// is judged by on one key ([`KeyLine::decide`]); `fresh`, `blocking` and `expired` what
/// [`KeyLine::survey`] found besides `mine` and `ahead`.
pub(super) const LINE_DECLARATIONS: &str = "  queued boolean;\n  slots bigint;\n  mine bigint;\n  \
     ahead bigint;\n  admitted boolean;\n  line_ticket bigint;\n  judged_at bigint;\n  \
     fresh boolean;\n  blocking bigint;\n  expired bigint;\n";

/// Whether the line `kind` of the key `key` (an SQL expression: `$1`, or `$1[i]` in the set's
/// function) in the table `line` (quoted) has any place: one index probe, which the acquire
/// functions make in the statement that reads the key's lock or permits anyway (no statement of
/// its own), into the variable `queued` that [`admit_by_line`] reads.
pub(super) fn line_probe(line: &str, kind: LeaseKind, key: &str) -> String {
    let kind = line_kind(kind);
    format!("EXISTS (SELECT 1 FROM {line} q WHERE q.key = {key} AND q.kind = '{kind}')")
}

/// One key's line, as THE RULE's steps see it: the table `line` (quoted), the line `kind`, and
/// the key, an SQL expression (`$1` in the single-key functions, `$1[i]` in the set's).
#[derive(Clone, Copy)]
pub(super) struct KeyLine<'a> {
    pub line: &'a str,
    pub kind: LeaseKind,
    pub key: &'a str,
}

impl<'a> KeyLine<'a> {
    /// The line `kind` of the single-key functions' key, `$1`, in the table `line` (quoted).
    fn of_one_key(line: &'a str, kind: LeaseKind) -> Self {
        KeyLine {
            line,
            kind,
            key: "$1",
        }
    }

    fn this_line(&self) -> String {
        format!(
            "q.key = {} AND q.kind = '{}'",
            self.key,
            line_kind(self.kind)
        )
    }

    /// The first part of step 3 of THE RULE, once `queued` holds the [`line_probe`]: prunes the
    /// expired places (only when the line has any) and finds the waiter's own place, `mine`
    /// (its ticket; NULL when it stands nowhere in this line, or is no waiter).
    pub fn find(&self) -> String {
        let this_line = self.this_line();
        let line = self.line;
        format!(
            "mine := NULL;\n\
             IF queued THEN\n\
             DELETE FROM {line} q WHERE {this_line} AND q.expires_at_ms <= now_ms - $7;\n\
             IF $9 = 'wait' THEN\n\
             SELECT q.ticket INTO mine FROM {line} q WHERE {this_line} AND q.place_id = $10;\n\
             END IF;\n\
             END IF;\n"
        )
    }

    /// The rest of step 3, once `slots` holds the free slots and [`find`](KeyLine::find) has
    /// run: sets `admitted`. A waiter that stands in this line is judged where it stands
    /// (`mine`), whatever ticket it carries — a retry whose answer was lost carries none, or
    /// another — so its own place is never ahead of it; one that does not, by the ticket it
    /// carries (`line_ticket`), else every place is ahead (a newcomer; every place for a
    /// single attempt too; none for `ignore`). The places ahead are the others ordered before
    /// (that ticket, its place id): by ticket, then place id in byte order (`COLLATE "C"`). A
    /// shared request counts only the exclusive places ahead of it: with its one slot free (no
    /// live lock), it passes iff none is there, as
    /// [`Places::admits`](crate::line::Places::admits) decides.
    pub fn decide(&self) -> String {
        // Readers pass readers: only exclusive places ahead hold a shared request back.
        let blocking = if self.kind == LeaseKind::Shared {
            " AND NOT q.shared"
        } else {
            ""
        };
        format!(
            "admitted := slots > 0;\n\
             IF queued AND $9 <> 'ignore' AND admitted THEN\n\
             judged_at := COALESCE(mine, line_ticket);\n\
             {count}\
             admitted := slots > ahead;\n\
             END IF;\n",
            count = self.count_before(blocking)
        )
    }

    /// The waiter leaves this line (granted): its place, if it stands here (`mine`), is deleted.
    pub fn leave(&self) -> String {
        format!(
            "IF mine IS NOT NULL THEN\n\
             DELETE FROM {} q WHERE {} AND q.place_id = $10;\n\
             END IF;\n",
            self.line,
            self.this_line()
        )
    }

    /// The waiter stands in this line (refused): its place, standing here already (`mine`),
    /// keeps its ticket and is renewed for [`PLACE_TTL`] with the holder `$8` — unless it is
    /// fresh with the same holder: then nothing is written. A new place takes `line_ticket`,
    /// or, when the waiter carries none yet, the line's next ticket (the identity sequence,
    /// drawn by the insertion), which then becomes `line_ticket`. A ticket carried was drawn
    /// from the same sequence, so the sequence is past it already: every later new place goes
    /// behind it (the line's last ticket is at least it).
    pub fn stand(&self) -> String {
        let (line, this_line) = (self.line, self.this_line());
        let kind = line_kind(self.kind);
        let shared = self.kind == LeaseKind::Shared;
        let key = self.key;
        let place_ttl_ms = PLACE_TTL.as_millis();
        format!(
            "IF mine IS NOT NULL THEN\n\
             UPDATE {line} q SET expires_at_ms = now_ms + {place_ttl_ms}, holder = $8\n\
             WHERE {this_line} AND q.place_id = $10\n\
             AND (q.expires_at_ms <= now_ms + {PLACE_FRESH_MS} OR q.holder IS DISTINCT FROM $8);\n\
             ELSIF line_ticket IS NULL THEN\n\
             INSERT INTO {line} AS q (key, kind, place_id, expires_at_ms, holder, shared)\n\
             VALUES ({key}, '{kind}', $10, now_ms + {place_ttl_ms}, $8, {shared})\n\
             RETURNING q.ticket INTO line_ticket;\n\
             ELSE\n\
             INSERT INTO {line} (key, kind, place_id, ticket, expires_at_ms, holder, shared)\n\
             OVERRIDING SYSTEM VALUE\n\
             VALUES ({key}, '{kind}', $10, line_ticket, now_ms + {place_ttl_ms}, $8, {shared});\n\
             END IF;\n"
        )
    }

    /// Step 4's answer, after the waiter stood here ([`stand`](KeyLine::stand)): how many live
    /// places stand ahead of its own — ordered before (its place's ticket, its place id), as
    /// [`Places::ahead_of`](crate::line::Places::ahead_of) counts them: every place, shared or
    /// not — into `places_ahead`, kept as the most over the lines it stands in (`GREATEST`
    /// skips the NULL it starts as). Every place left is live: the expired ones were pruned in
    /// [`find`](KeyLine::find) (or the line was empty). Refused path only: one index range of
    /// `(key, kind, ticket)`.
    pub fn count_ahead(&self) -> String {
        format!(
            "judged_at := COALESCE(mine, line_ticket);\n\
             {count}\
             places_ahead := GREATEST(places_ahead, ahead);\n",
            count = self.count_before("")
        )
    }

    /// Counts into `ahead` the places of this line ordered before (`judged_at`, the place id
    /// `$10`) by ticket, then place id in byte order (`COLLATE \"C\"`) — every place when
    /// `judged_at` is NULL — never the waiter's own; with `blocking`, only those it selects.
    fn count_before(&self, blocking: &str) -> String {
        format!(
            "SELECT count(*) INTO ahead FROM {} q\n\
             WHERE {} AND q.place_id IS DISTINCT FROM $10{blocking}\n\
             AND (judged_at IS NULL OR q.ticket < judged_at\n\
             OR (q.ticket = judged_at AND q.place_id COLLATE \"C\" < $10 COLLATE \"C\"));\n",
            self.line,
            self.this_line()
        )
    }

    /// Step 3 of THE RULE for one key, in one statement once `queued` holds the [`line_probe`]
    /// (none when the line is empty, or for `ignore`, which barges): the waiter's own live place
    /// (`mine`, its ticket; `fresh`, whether it was renewed within the last
    /// [`PLACE_RENEWAL`](crate::line::PLACE_RENEWAL) with the holder `$8`, so that standing
    /// there writes nothing), the live places ahead of it (`ahead`, judged as
    /// [`decide`](KeyLine::decide) judges: where it stands, else by the ticket it carries, else
    /// behind every place; of those, `blocking`: the ones that hold it back, the exclusive ones
    /// for a shared request), and how many places of the line have `expired`. Nothing is
    /// deleted here: a granted waiter's place and the expired ones go in one `DELETE`
    /// ([`leave_granted`](KeyLine::leave_granted)), a refused waiter's line is pruned only when
    /// something expired. Replaces [`find`](KeyLine::find), [`decide`](KeyLine::decide)'s count
    /// and [`count_ahead`](KeyLine::count_ahead), three statements and a `DELETE`, on the
    /// single-key functions; the set's function keeps them, for its ticket is known only once
    /// every key was read.
    pub fn survey(&self) -> String {
        let (line, this_line) = (self.line, self.this_line());
        let live = "q.expires_at_ms > now_ms - $7";
        let before = "q.place_id IS DISTINCT FROM $10\n\
             AND (judged.at IS NULL OR q.ticket < judged.at\n\
             OR (q.ticket = judged.at AND q.place_id COLLATE \"C\" < $10 COLLATE \"C\"))";
        // Readers pass readers: only exclusive places ahead hold a shared request back; for
        // the others, every place ahead does.
        let (blocking, into_blocking, blocking_otherwise) = if self.kind == LeaseKind::Shared {
            let count = format!(",\ncount(*) FILTER (WHERE {live} AND {before} AND NOT q.shared)");
            (count, ", blocking", "")
        } else {
            (String::new(), "", "blocking := ahead;\n")
        };
        format!(
            "mine := NULL;\n\
             fresh := NULL;\n\
             ahead := 0;\n\
             blocking := 0;\n\
             expired := 0;\n\
             IF queued AND $9 <> 'ignore' THEN\n\
             WITH own AS (SELECT q.ticket,\n\
             q.expires_at_ms > now_ms + {PLACE_FRESH_MS} AND q.holder IS NOT DISTINCT FROM $8 AS fresh\n\
             FROM {line} q WHERE {this_line} AND q.place_id = $10 AND {live}),\n\
             judged AS (SELECT COALESCE((SELECT own.ticket FROM own), line_ticket) AS at)\n\
             SELECT (SELECT own.ticket FROM own), (SELECT own.fresh FROM own),\n\
             count(*) FILTER (WHERE q.expires_at_ms <= now_ms - $7),\n\
             count(*) FILTER (WHERE {live} AND {before}){blocking}\n\
             INTO mine, fresh, expired, ahead{into_blocking}\n\
             FROM judged LEFT JOIN {line} q ON {this_line};\n\
             {blocking_otherwise}\
             END IF;\n"
        )
    }

    /// A granted waiter leaves this line after [`survey`](KeyLine::survey): its place, if it
    /// stands here, and the expired places, in one `DELETE`, only when there is one to delete.
    pub fn leave_granted(&self) -> String {
        format!(
            "IF mine IS NOT NULL OR expired > 0 THEN\n\
             DELETE FROM {} q WHERE {} AND (q.place_id = $10 OR q.expires_at_ms <= now_ms - $7);\n\
             END IF;\n",
            self.line,
            self.this_line()
        )
    }

    /// A refused waiter's line is pruned of its expired places, when [`survey`](KeyLine::survey)
    /// found any, before the waiter stands: its own expired place goes with them, and it stands
    /// anew at the back.
    pub fn prune(&self) -> String {
        format!(
            "IF expired > 0 THEN\n\
             DELETE FROM {} q WHERE {} AND q.expires_at_ms <= now_ms - $7;\n\
             END IF;\n",
            self.line,
            self.this_line()
        )
    }

    /// Step 5, after a refused waiter stood ([`stand`](KeyLine::stand)): now and then, a few
    /// places of any key's line that expired long ago are deleted
    /// ([`sweep_long_expired`]). A place is made only by a refusal, so sweeping on refusals
    /// keeps pace with the places killed waiters leave behind, and the uncontended path (key
    /// free, line empty) runs no statement more. The function waits for nothing after it.
    pub fn sweep(&self) -> String {
        sweep_long_expired(self.line)
    }
}

/// THE RULE in PL/pgSQL for one key, the key `$1` in the table `line` (quoted), with `free`
/// slots (an expression of the function's variables) at `now_ms`, once `queued` holds the
/// [`line_probe`]: the steps of the module docs, the line read in one statement
/// ([`KeyLine::survey`]), then [`KeyLine::leave_granted`], or [`KeyLine::prune`],
/// [`KeyLine::stand`] (only for a new place or one that is not fresh) and [`KeyLine::sweep`]. A
/// single attempt or a barging one that finds no slot free stops at once, before the line is
/// read. Continues the function when the acquisition is granted, returns from it (answering
/// "held") when not. The function's parameters: `$7` tolerance ms, `$8` holder description,
/// `$9` mode, `$10` place id, `$11` ticket (see [`line_params`]).
pub(super) fn admit_by_line(line: &str, kind: LeaseKind, free: &str) -> String {
    let key_line = KeyLine::of_one_key(line, kind);
    format!(
        "{look}\
         admitted := slots > blocking;\n\
         IF $9 = 'wait' THEN\n\
         IF admitted THEN\n\
         {leave}\
         ELSE\n\
         {prune}\
         IF mine IS NULL OR fresh IS NOT TRUE THEN\n\
         {stand}\
         END IF;\n\
         places_ahead := ahead;\n\
         {sweep}\
         END IF;\n\
         ELSIF admitted THEN\n\
         {prune}\
         END IF;\n\
         IF NOT admitted THEN RETURN; END IF;\n",
        look = look_at_line(&key_line, free),
        leave = key_line.leave_granted(),
        prune = key_line.prune(),
        stand = key_line.stand(),
        sweep = key_line.sweep(),
    )
}

/// The first steps of THE RULE for one key (see [`admit_by_line`]): the free `slots`, a stop
/// for a single or barging attempt that finds none, and the line read ([`KeyLine::survey`]).
fn look_at_line(key_line: &KeyLine<'_>, free: &str) -> String {
    format!(
        "line_ticket := $11;\n\
         slots := {free};\n\
         IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;\n\
         {survey}",
        survey = key_line.survey(),
    )
}

/// A refusal decided before the key's advisory lock is taken, for an acquirer that found it
/// taken (`pg_try_advisory_xact_lock` failed: another acquisition of the key is running, as
/// when a release wakes every waiter of the key at once). Once the key's lock row has been read
/// ([`LockSql::read`](super::lock_sql::LockSql::read)) without the lock, the line is read the
/// same way ([`KeyLine::survey`] of the lock's line, kind `kind`, with `free` slots): an
/// attempt that THE RULE refuses and that has nothing to write — a single attempt, or a waiter
/// whose place stands there fresh — returns at once, answering its position, instead of
/// queueing for the advisory lock behind the other waiters only to be refused there. Every
/// other attempt goes on to take the lock and decide again on what it reads then. A refusal
/// writes nothing and grants nothing, so the reads need no lock: at worst one is refused on a
/// snapshot a moment old, and the release it missed is announced to it after its attempt
/// (`NOTIFY` at the release's commit) or found at its next poll.
pub(super) fn refuse_unlocked(line: &str, kind: LeaseKind, free: &str) -> String {
    let key_line = KeyLine::of_one_key(line, kind);
    format!(
        "{look}\
         IF slots <= blocking AND ($9 <> 'wait' OR fresh) THEN\n\
         IF $9 = 'wait' THEN places_ahead := ahead; END IF;\n\
         RETURN;\n\
         END IF;\n",
        look = look_at_line(&key_line, free),
    )
}

/// `$1` storage key, `$2` kind (`'lock'` or `'permit'`, see [`line_kind`]), `$3` tolerance ms
/// → the live places of that line, in ticket order (function only).
pub(super) fn places(tables: &Quoted<'_>) -> Op {
    let line = &tables.line;
    Op::query(
        tables.names,
        "line",
        &[Type::TEXT, Type::TEXT, Type::INT8],
        "place_id text, ticket bigint, expires_at_ms bigint, holder text, shared boolean",
        format!(
            "SELECT q.place_id, q.ticket, q.expires_at_ms, q.holder, q.shared\n\
             FROM {line} q\n\
             WHERE q.key = $1 AND q.kind = $2 AND q.expires_at_ms > {NOW_MS} - $3\n\
             ORDER BY q.ticket, q.place_id COLLATE \"C\""
        ),
    )
    .function_only()
}

/// `$1` storage key, `$2` kind, `$3` place id → whether the place was there, deleting it
/// (function only).
pub(super) fn leave_place(tables: &Quoted<'_>) -> Op {
    let line = &tables.line;
    Op::query(
        tables.names,
        "leave",
        &[Type::TEXT, Type::TEXT, Type::TEXT],
        "gone boolean",
        format!(
            "WITH deleted AS (DELETE FROM {line} q\n\
                 WHERE q.key = $1 AND q.kind = $2 AND q.place_id = $3 RETURNING 1)\n\
             SELECT EXISTS (SELECT 1 FROM deleted) AS gone"
        ),
    )
    .function_only()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::driver::LockId;

    #[test]
    fn the_rule_names_its_own_line_only() {
        let lock = admit_by_line("\"t_line\"", LeaseKind::Lock, "1");
        let permit = admit_by_line("\"t_line\"", LeaseKind::Permit, "$5 - held");
        assert!(lock.contains("q.kind = 'lock'") && !lock.contains("'permit'"));
        assert!(permit.contains("q.kind = 'permit'") && !permit.contains("'lock'"));
        assert!(lock.contains(&format!("now_ms + {}", PLACE_TTL.as_millis())));
        let shared = admit_by_line("\"t_line\"", LeaseKind::Shared, "1");
        assert!(shared.contains("q.kind = 'lock'") && shared.contains("AND NOT q.shared"));
        assert!(!lock.contains("NOT q.shared") && !permit.contains("NOT q.shared"));
    }

    /// The sweep of other keys' places runs on the refused path only, after the waiter stood,
    /// and the function returns after it: the granted and uncontended paths never run it.
    #[test]
    fn the_sweep_runs_after_a_refusal_only() {
        for kind in [LeaseKind::Lock, LeaseKind::Shared, LeaseKind::Permit] {
            let rule = admit_by_line("\"t_line\"", kind, "1");
            let at = |what: &str| rule.find(what).unwrap_or_else(|| panic!("{what}:\n{rule}"));
            let (refused, sweep) = (at("ELSE\n"), at("FOR UPDATE SKIP LOCKED"));
            assert!(refused < sweep && sweep < at("IF NOT admitted THEN RETURN"));
            assert_eq!(rule.matches("FOR UPDATE SKIP LOCKED").count(), 1);
        }
    }

    #[test]
    fn modes_and_places() {
        let place = LockId::generate();
        assert_eq!(line_params(Line::Ignore), ("ignore", None, None));
        assert_eq!(line_params(Line::Keep), ("keep", None, None));
        assert_eq!(
            line_params(Line::Wait(&place)),
            ("wait", Some(place.as_str()), None)
        );
        assert_eq!(
            line_params(Line::WaitAt(&place, 7)),
            ("wait", Some(place.as_str()), Some(7))
        );
    }
}
