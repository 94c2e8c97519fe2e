//! The command's help texts that are not an argument's own: the exit codes and signals table,
//! the top-level examples, and the epilogues of `run`, `list` and `status`. The texts that
//! `concat!` joins into a help are macros ([`exit_codes!`], [`examples!`], [`run_help!`]).

/// Exit codes, and what `run` does on each signal: the one table, shown by `--help` and
/// `run --help` (and copied in the README's CLI section); a macro so that `concat!` can put it
/// into the help.
macro_rules! exit_codes {
    () => {
        "\
Exit codes:
  0        success (run: the command's own exit code, passed through, whatever it is)
  1        a negative answer: acquire found the lock held; release/extend/status found none;
           break found nothing held; leader found nobody leading
  2        bad usage or argument (including a memory: URL, which means nothing across processes)
  3        a backend error: unreachable, credentials refused, tables missing, a record or key
           the backend holds that syncguard cannot use (e.g. a Redis key of another type)
  75 or N  run: the lock was not acquired within --wait (N from -E/--conflict-exit-code)
  76       run: the lock was lost (or about to be: no renewal confirmed --grace before the
           lease's deadline) while the command ran (--on-lost kill)
  124      run: the command reached --max-runtime
  126/127  run: the command could not be executed / was not found
  128+n    run: the command was killed by signal n (or run got signal n while waiting)
A command's own exit code may be any of these: pick an -E code it never uses.

Signals (run):
  TERM INT HUP QUIT  while waiting for the lock: stop waiting, run nothing, exit 128+n.
                     while the command runs: sent on to its whole process group (with SIGCONT);
                     SIGKILL to the group if it is still there --grace later; exit with the
                     command's code once every process of the group is gone; then release.
  KILL               cannot be passed on: the whole group is killed with run (Linux: by a watcher
                     process and a parent-death signal); the lock expires at --ttl.
  others             their default effect on run itself."
    };
}
pub(crate) use exit_codes;

/// The top-level help's examples.
macro_rules! examples {
    () => {
        "\
Examples:
  export SYNCGUARD_URL=redis://127.0.0.1:6379/
  # cron on several machines: the report runs once per schedule (at most 2 hours); the key
  # stays held 5 minutes at least, so the others skip it, exiting 0 and printing nothing
  # (-E 0 -q: cron mails nothing for a skip)
  syncguard run --key nightly-report --min-hold 5m --max-runtime 2h -E 0 -q -- ./make-report.sh
  # every machine runs the job, one at a time
  syncguard run --key reindex --wait 1h -- ./reindex.sh
  # at most 3 machines export at once (a semaphore: one of 3 permits instead of the lock)
  syncguard run --key partner-export --permits 3 --wait 1h -- ./export.sh
  # several commands under one lock: nothing runs unless acquire succeeded
  if out=$(syncguard acquire --key deploy --ttl 5m); then
    ./deploy.sh
    syncguard release --lock-id \"$(printf '%s' \"$out\" | jq -r .lockId)\"
  fi"
    };
}
pub(crate) use examples;

/// `run --help`'s epilogue, before the exit codes.
macro_rules! run_help {
    () => {
        "\
Example:
  syncguard run --key nightly-report --wait 10m --max-runtime 1h -- ./make-report.sh --full

The command runs in a process group of its own (so, from an interactive shell, it cannot read
the terminal: give it input from a file or a pipe), with SYNCGUARD_FENCE, SYNCGUARD_LOCK_ID
and SYNCGUARD_KEY in its environment, while run renews the lease every third of --ttl minus
--grace (--on-lost warn: of --ttl). The lock is released only once every process of the group
has exited, background jobs included. With --on-lost kill, the lease's local deadline (the send
time of the last renewal the backend confirmed, plus --ttl; the backend's record never expires
earlier) bounds the group: SIGTERM at the deadline minus --grace, SIGKILL at the deadline, so
that it is gone before another holder can take the lock; a renewal that finds the lock gone
ends it at once the same way. At --max-runtime and on a signal, the group gets SIGTERM, then
SIGKILL after --grace. At the end run releases the lock, after a loss too (a renewal may have
been applied although its answer never came), waiting at most 2s for the backend (once a
renewal in flight has come back); if it does not answer, run says so and exits, and the lock
expires at its ttl.

With several --key (exclusive locks only), run holds every key's lock together, all or none: it
waits while any is held without holding the others, and the set is lost as a whole when any lease
is. SYNCGUARD_KEY, SYNCGUARD_FENCE and SYNCGUARD_LOCK_ID then hold one value per key, one per
line, in the keys' byte order (NFC, duplicates collapsed): read them with
  printf '%s\\n' \"$SYNCGUARD_FENCE\" | while read -r fence; do …; done

With --permits N, run holds one of the N permits of the key's semaphore instead of the lock, so
that at most N commands run at once under that key; all of the above applies to the permit
(SYNCGUARD_LOCK_ID and SYNCGUARD_FENCE are the permit's), and the exit codes say \"lock\" for it.
The semaphore is not the key's lock: `run --key K` and `run --key K --permits 1` do not exclude
each other. Give every run on one key the same N.

"
    };
}
pub(crate) use run_help;

/// `list --help`'s epilogue.
pub const LIST_HELP: &str = "\
Example:
  syncguard list --prefix report: --raw
  → {\"keyHash\":\"…\",\"lockIdHash\":\"…\",\"expiresAtMs\":…,\"acquiredAtMs\":…,\"fence\":\"…\",\"key\":\"report:daily\",\"lockId\":\"…\"}

The work is bounded: when more locks match than --limit, the first ones are printed and a note
on stderr says so; a backend that stops at its own bound first (Redis: keys scanned; Firestore:
pages read) prints what it found and says that locks may be missing. Both exit 0.

With --permits, the held permits of semaphores (acquire/run --permits) are listed instead of
locks: one line per permit, sorted by key, then fence; --limit counts permits.";

/// `status --help`'s epilogue.
pub const STATUS_HELP: &str = "\
Example:
  syncguard status --key deploy --raw

With --key, the holders of the key's semaphore (taken with acquire/run --permits), if it has
any, are added as \"permits\": an array of the objects status prints for a lock, in fence
order (lock ids hashed unless --raw). A key whose lock is free but whose semaphore is held
prints {\"permits\":[…]} alone (exit 0); a key with neither prints null (exit 1).
The lock's shared holders (acquire/run --shared) are added as \"readers\", in fence order.
Waiters in line for the lock are added as \"waiters\" (for the semaphore: \"permitWaiters\"),
in the order they will be served: [{\"placeHash\",\"expiresAtMs\",\"holder\",\"shared\"}, …]. Where the
store keeps no semaphores (PostgreSQL tables without this version's setup), the lock is shown
alone. --lock-id finds locks only.
While a break's marker keeps the key (syncguard break), the marker is shown as the holder
(exit 0) and \"broken\" is added: {\"kind\":\"lock\"|\"shared\"|\"permit\",\"by\",\"reason\",\"atMs\",
\"untilMs\"} — who broke it, why, when, and until when the key is kept (the latest break).";

/// `break --help`'s epilogue.
pub const BREAK_HELP: &str = "\
Example:
  syncguard break --key nightly-report --reason \"hung since 02:00\" --delay 2m
  → {\"ok\":true,\"broken\":[{\"keyHash\":\"…\",\"lockIdHash\":\"…\",\"expiresAtMs\":…,\"acquiredAtMs\":…,
     \"fence\":\"000000000000041\",\"holder\":\"web-1:4242 make-report.sh\"}],
     \"markers\":[{\"fence\":\"000000000000042\",\"untilMs\":…}]}
  (exit 1 and {\"ok\":false,\"reason\":\"nothing held\"} if nothing live was held)
  syncguard break --key export --permits 3 --lock-id \"$id\" --delay 0

The broken holder learns at its next renewal: its guard reports the loss, and run --on-lost
kill ends its command. Each broken holder's place is taken by a marker (held by nobody, with
the next fence of the key) until --delay ends, so the key is granted to nobody before the broken
holder has stopped; the next grant's fence is above the broken one's. status shows the marker
as the key's holder, with \"broken\": {\"kind\",\"by\",\"reason\",\"atMs\",\"untilMs\"}. A marker is
never broken itself: breaking a broken key again answers \"nothing held\". To end the delay
early, release the marker by its lock id (status --key K --raw shows it). The key's line is
left as it is. TypeScript SyncGuard clients see the marker as an ordinary held lock.";

/// `watch --help`'s epilogue.
pub const WATCH_HELP: &str = "\
Example:
  syncguard watch --key deploy
  → {\"state\":\"held\",\"holders\":[{\"keyHash\":…,\"lockIdHash\":…,\"fence\":…,\"holder\":…}]}
    {\"state\":\"released\"}
  syncguard watch --key deploy --until-free && ./deploy.sh   (exits 0 once nothing holds it)

The first line is the key's state now; then one line per change, each flushed as it comes.
\"held\" lists the holders as status prints them (lock ids hashed), in fence order; \"free\"
is the first state of a free key; \"released\" and \"expired\" say how the holders seen went;
\"broken\" (syncguard break) has \"by\", \"reason\", \"atMs\", \"untilMs\" and \"fence\". A
release is seen at once on Redis and PostgreSQL (their release notifications); everything
else, and everything on Firestore or through PgBouncer, within 1 second (the watch reads the
key at least once a second). Changes between two reads merge: the latest state is always
printed. A store that restarts is read again until it answers. Ends on SIGTERM or SIGINT
with exit 0.";
