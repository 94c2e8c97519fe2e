-- syncguard (Rust) and SyncGuard (TypeScript) share these tables: same names, columns, types
-- and indexes (plus syncguard's optional `holder` column, which the TypeScript SyncGuard never
-- writes and ignores). Apply once, e.g. `psql -d myapp -f schema.sql`, or call
-- syncguard::postgres::setup_schema. Safe to run again.
--
-- Written for these table names (index, function, semaphore, permit and line table names follow
-- the lock table's name):
--   lock table:          syncguard_locks
--   fence counter table: syncguard_fence_counters
-- For other names, generate it with syncguard::postgres::schema_sql rather than search and
-- replace, which goes wrong where one name contains another.

-- Locks: one row per held key; deleted on release (or replaced once expired).
CREATE TABLE IF NOT EXISTS syncguard_locks (
  key TEXT PRIMARY KEY,            -- storage key: make_storage_key("", user key, 1700, 0)
  lock_id TEXT NOT NULL,           -- 22 base64url characters from a CSPRNG
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms
  acquired_at_ms BIGINT NOT NULL,  -- server time, Unix ms
  fence TEXT NOT NULL,             -- 15-digit zero-padded fencing token
  user_key TEXT NOT NULL           -- the NFC-normalised user key
);

-- Release, extend and lookup find a lock by its id.
CREATE UNIQUE INDEX IF NOT EXISTS idx_syncguard_locks_lock_id ON syncguard_locks (lock_id);

-- Finding expired locks (monitoring, cleanup).
CREATE INDEX IF NOT EXISTS idx_syncguard_locks_expires ON syncguard_locks (expires_at_ms);

-- Fence counters: one row per key ever locked. NEVER delete these rows: fences must keep
-- growing across releases, expiries and restarts.
CREATE TABLE IF NOT EXISTS syncguard_fence_counters (
  fence_key TEXT PRIMARY KEY,      -- make_storage_key("", "fence:" + storage key, 1700, 0)
  fence BIGINT NOT NULL DEFAULT 0, -- the last fence issued
  key_debug TEXT                   -- the user key, for people reading the table
);

-- Who holds each lock (syncguard for Rust, optional: the TypeScript SyncGuard writes only the
-- columns it names and reads only the fields it knows; tables it created lack it until this
-- runs): the lock
-- id of the lock described, a space, the description. Written and read by the functions below
-- only; a description left from an earlier lock (another lock id) reads as none.
ALTER TABLE syncguard_locks ADD COLUMN IF NOT EXISTS holder TEXT;

-- Semaphores (syncguard for Rust only: the TypeScript SyncGuard has no semaphores and never
-- reads these tables). A semaphore of N permits on a key is stored apart from the lock on that
-- key: a semaphore of one permit on "k" is not the lock on "k", and neither changes the other's
-- rows or fences. Written and read by the server functions below only.

-- One row per semaphore ever used, holding its own fence sequence (not the key's lock fence
-- counter). Acquirers of a semaphore lock its row, so they take turns. NEVER delete these
-- rows: permit fences must keep growing across releases, expiries and restarts.
CREATE TABLE IF NOT EXISTS syncguard_locks_semaphores (
  key TEXT NOT NULL,               -- storage key, as the lock table's
  fence BIGINT NOT NULL DEFAULT 0, -- the last permit fence issued
  user_key TEXT NOT NULL,          -- the NFC-normalised user key, for people reading the table
  CONSTRAINT syncguard_locks_sem_pk PRIMARY KEY (key)
);

-- One row per permit held; deleted on release, or once expired by the next acquire of its key
-- (or, a minute later, of any key). A permit is named by its key and lock id.
CREATE TABLE IF NOT EXISTS syncguard_locks_permits (
  key TEXT NOT NULL,               -- storage key of the semaphore
  lock_id TEXT NOT NULL,           -- 22 base64url characters from a CSPRNG
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms
  acquired_at_ms BIGINT NOT NULL,  -- server time, Unix ms
  fence TEXT NOT NULL,             -- 15-digit zero-padded fencing token of the semaphore
  user_key TEXT NOT NULL,          -- the NFC-normalised user key
  holder TEXT,                     -- who holds it, as described at acquisition (NULL: none)
  CONSTRAINT syncguard_locks_permit_pk PRIMARY KEY (key, lock_id)
);

-- Permit acquisitions delete a few permits of any key that expired over a minute ago, the
-- oldest first: a semaphore whose key is never used again leaves no permit row behind.
CREATE INDEX IF NOT EXISTS syncguard_locks_permit_exp ON syncguard_locks_permits (expires_at_ms);

-- The line (syncguard for Rust only: the TypeScript SyncGuard knows no line, never reads this
-- table, and its acquisitions pass the line). One row per waiter's place in the line of a key's
-- lock or of its semaphore; deleted when its waiter is granted or gives up, or once expired by
-- the next acquisition of its line (or, a minute later, by a refused waiter of any key).
-- Written and read by the server functions below only.
CREATE TABLE IF NOT EXISTS syncguard_locks_line (
  key TEXT NOT NULL,               -- storage key of the lock or the semaphore
  kind TEXT NOT NULL,              -- 'lock' or 'permit': the key's lock and semaphore each have one
  place_id TEXT NOT NULL,          -- the waiter's place id, 22 base64url characters
  ticket BIGINT GENERATED ALWAYS AS IDENTITY, -- arrival order at the server; never drawn twice
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms; renewed by each attempt of its waiter
  holder TEXT,                     -- who waits, as described at acquisition (NULL: none)
  CONSTRAINT syncguard_locks_line_pk PRIMARY KEY (key, kind, place_id)
);

-- A line in ticket order, and the probe every acquisition makes for it.
CREATE INDEX IF NOT EXISTS syncguard_locks_line_ticket ON syncguard_locks_line (key, kind, ticket);

-- Whether a place of a lock's line waits for a shared hold (a reader) or for the lock itself
-- (lines made before shared holds have none: their places wait for the lock).
ALTER TABLE syncguard_locks_line ADD COLUMN IF NOT EXISTS shared BOOLEAN NOT NULL DEFAULT false;

-- Refused waiters delete a few places of any key that expired over a minute ago, the oldest
-- first: the line of a key nobody asks for again (a killed waiter of a per-job key) keeps no
-- place behind.
CREATE INDEX IF NOT EXISTS syncguard_locks_line_exp ON syncguard_locks_line (expires_at_ms);

-- Shared holds (readers) of a key's lock (syncguard for Rust only: the TypeScript SyncGuard
-- never reads this table, so it sees the exclusive record alone and can take the lock while
-- readers hold it shared). One row per reader, beside the key's lock record: its own lock id,
-- expiry and holder, and a fence from the key's LOCK fence counter. Deleted on release, or once
-- expired by the next shared acquisition of its key (or, a minute later, of any key). Written
-- and read by the server functions below only; the exclusive acquisition reads it.
CREATE TABLE IF NOT EXISTS syncguard_locks_shared (
  key TEXT NOT NULL,               -- storage key of the lock
  lock_id TEXT NOT NULL,           -- 22 base64url characters from a CSPRNG
  expires_at_ms BIGINT NOT NULL,   -- server time, Unix ms
  acquired_at_ms BIGINT NOT NULL,  -- server time, Unix ms
  fence TEXT NOT NULL,             -- 15-digit zero-padded fencing token from the lock's counter
  user_key TEXT NOT NULL,          -- the NFC-normalised user key
  holder TEXT,                     -- who holds it, as described at acquisition (NULL: none)
  CONSTRAINT syncguard_locks_shared_pk PRIMARY KEY (key, lock_id)
);

-- Shared acquisitions delete a few readers of any key that expired over a minute ago.
CREATE INDEX IF NOT EXISTS syncguard_locks_shared_exp ON syncguard_locks_shared (expires_at_ms);

-- Server functions (syncguard for Rust; the TypeScript SyncGuard does not use them). Each does what
-- one statement of the backend does, with plans cached per server connection: without them
-- the statements are sent inline, planned on every call. Generated from the source; the
-- version suffix changes with the statements.
-- A function of the same name and parameter types whose parameters or result differ
-- (an earlier syncguard's) cannot be replaced: it is dropped first.
DO $replaced$ BEGIN
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_acquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, bigint)'))
    IS DISTINCT FROM 'text, text, bigint, text, text, bigint, bigint, text, text, text, bigint, OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean, OUT places_ahead bigint -> record' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_acquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_macquire_v8(text[], text[], bigint, text[], text[], bigint, bigint, text, text, text, bigint)'))
    IS DISTINCT FROM 'text[], text[], bigint, text[], text[], bigint, bigint, text, text, text, bigint, OUT lock_fences text[], OUT expires_at_ms bigint, OUT ticket bigint, OUT bad_key text, OUT bad_counter bigint, OUT malformed_key text, OUT places_ahead bigint -> record' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_macquire_v8(text[], text[], bigint, text[], text[], bigint, bigint, text, text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_release_v8(text, bigint)'))
    IS DISTINCT FROM 'text, bigint, OUT live boolean, OUT malformed_key text -> record' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_release_v8(text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_extend_v8(text, bigint, bigint)'))
    IS DISTINCT FROM 'text, bigint, bigint -> TABLE(expires_at_ms bigint, present boolean, malformed_key text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_extend_v8(text, bigint, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_renew_v8(text[], bigint[], bigint)'))
    IS DISTINCT FROM 'text[], bigint[], bigint -> TABLE(lock_id text, expires_at_ms bigint, present boolean, live boolean, malformed_key text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_renew_v8(text[], bigint[], bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_locked_v8(text, bigint)'))
    IS DISTINCT FROM 'text, bigint -> TABLE(locked boolean, malformed boolean)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_locked_v8(text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_sweep_v8(text, bigint, bigint)'))
    IS DISTINCT FROM 'text, bigint, bigint -> TABLE(locked boolean, malformed boolean)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_sweep_v8(text, bigint, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_by_key_v8(text, bigint)'))
    IS DISTINCT FROM 'text, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_by_key_v8(text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_by_id_v8(text, bigint)'))
    IS DISTINCT FROM 'text, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_by_id_v8(text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_list_v8(text, bigint, bigint)'))
    IS DISTINCT FROM 'text, bigint, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_list_v8(text, bigint, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_pacquire_v8(text, text, bigint, text, bigint, bigint, bigint, text, text, text, bigint)'))
    IS DISTINCT FROM 'text, text, bigint, text, bigint, bigint, bigint, text, text, text, bigint, OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT places_ahead bigint -> record' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_pacquire_v8(text, text, bigint, text, bigint, bigint, bigint, text, text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_prelease_v8(text, text, bigint)'))
    IS DISTINCT FROM 'text, text, bigint, OUT live boolean -> boolean' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_prelease_v8(text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_prenew_v8(text[], text[], bigint[], bigint)'))
    IS DISTINCT FROM 'text[], text[], bigint[], bigint -> TABLE(ord bigint, expires_at_ms bigint, present boolean)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_prenew_v8(text[], text[], bigint[], bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_permits_v8(text, bigint)'))
    IS DISTINCT FROM 'text, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_permits_v8(text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_plist_v8(text, bigint, bigint)'))
    IS DISTINCT FROM 'text, bigint, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_plist_v8(text, bigint, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_sacquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, bigint)'))
    IS DISTINCT FROM 'text, text, bigint, text, text, bigint, bigint, text, text, text, bigint, OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean, OUT places_ahead bigint -> record' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_sacquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_srelease_v8(text, text, bigint)'))
    IS DISTINCT FROM 'text, text, bigint, OUT live boolean -> boolean' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_srelease_v8(text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_srenew_v8(text[], text[], bigint[], bigint)'))
    IS DISTINCT FROM 'text[], text[], bigint[], bigint -> TABLE(ord bigint, expires_at_ms bigint, present boolean)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_srenew_v8(text[], text[], bigint[], bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_readers_v8(text, bigint)'))
    IS DISTINCT FROM 'text, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_readers_v8(text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_slist_v8(text, bigint, bigint)'))
    IS DISTINCT FROM 'text, bigint, bigint -> TABLE(key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint, fence text, user_key text, holder text)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_slist_v8(text, bigint, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_line_v8(text, text, bigint)'))
    IS DISTINCT FROM 'text, text, bigint -> TABLE(place_id text, ticket bigint, expires_at_ms bigint, holder text, shared boolean)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_line_v8(text, text, bigint);
END IF;
IF (SELECT pg_get_function_arguments(p.oid) || ' -> ' || pg_get_function_result(p.oid) FROM pg_proc p WHERE p.oid = to_regprocedure('syncguard_locks_leave_v8(text, text, text)'))
    IS DISTINCT FROM 'text, text, text -> TABLE(gone boolean)' THEN
  DROP FUNCTION IF EXISTS syncguard_locks_leave_v8(text, text, text);
END IF;
END $replaced$;

CREATE OR REPLACE FUNCTION syncguard_locks_acquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, bigint,
  OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean, OUT places_ahead bigint)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  now_ms bigint;
  held boolean;
  own boolean;
  counter bigint;
  queued boolean;
  slots bigint;
  mine bigint;
  ahead bigint;
  admitted boolean;
  line_ticket bigint;
  judged_at bigint;
  fresh boolean;
  blocking bigint;
  expired bigint;
BEGIN
IF NOT pg_try_advisory_xact_lock(hashtext($1)) THEN
now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
SELECT (l.expires_at_ms > now_ms - $7 AND l.lock_id <> $2) IS TRUE
OR EXISTS (SELECT 1 FROM "syncguard_locks_shared" s WHERE s.key = $1
AND s.expires_at_ms > now_ms - $7),
l.key IS NOT NULL AND NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE, l.lock_id = $2, EXISTS (SELECT 1 FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock')
INTO held, malformed, own, queued
FROM (SELECT 1) AS one LEFT JOIN "syncguard_locks" l ON l.key = $1;
IF malformed IS NOT TRUE AND own IS NOT TRUE THEN
line_ticket := $11;
slots := CASE WHEN held THEN 0 ELSE 1 END;
IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;
mine := NULL;
fresh := NULL;
ahead := 0;
blocking := 0;
expired := 0;
IF queued AND $9 <> 'ignore' THEN
WITH own AS (SELECT q.ticket,
q.expires_at_ms > now_ms + 3334 AND q.holder IS NOT DISTINCT FROM $8 AS fresh
FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.place_id = $10 AND q.expires_at_ms > now_ms - $7),
judged AS (SELECT COALESCE((SELECT own.ticket FROM own), line_ticket) AS at)
SELECT (SELECT own.ticket FROM own), (SELECT own.fresh FROM own),
count(*) FILTER (WHERE q.expires_at_ms <= now_ms - $7),
count(*) FILTER (WHERE q.expires_at_ms > now_ms - $7 AND q.place_id IS DISTINCT FROM $10
AND (judged.at IS NULL OR q.ticket < judged.at
OR (q.ticket = judged.at AND q.place_id COLLATE "C" < $10 COLLATE "C")))
INTO mine, fresh, expired, ahead
FROM judged LEFT JOIN "syncguard_locks_line" q ON q.key = $1 AND q.kind = 'lock';
blocking := ahead;
END IF;
IF slots <= blocking AND ($9 <> 'wait' OR fresh) THEN
IF $9 = 'wait' THEN places_ahead := ahead; END IF;
RETURN;
END IF;
END IF;
PERFORM pg_advisory_xact_lock(hashtext($1));
END IF;
now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
SELECT (l.expires_at_ms > now_ms - $7 AND l.lock_id <> $2) IS TRUE
OR EXISTS (SELECT 1 FROM "syncguard_locks_shared" s WHERE s.key = $1
AND s.expires_at_ms > now_ms - $7),
l.key IS NOT NULL AND NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE, l.lock_id = $2, EXISTS (SELECT 1 FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock')
INTO held, malformed, own, queued
FROM (SELECT 1) AS one LEFT JOIN "syncguard_locks" l ON l.key = $1;
IF malformed THEN RETURN; END IF;
IF own IS NOT TRUE THEN
line_ticket := $11;
slots := CASE WHEN held THEN 0 ELSE 1 END;
IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;
mine := NULL;
fresh := NULL;
ahead := 0;
blocking := 0;
expired := 0;
IF queued AND $9 <> 'ignore' THEN
WITH own AS (SELECT q.ticket,
q.expires_at_ms > now_ms + 3334 AND q.holder IS NOT DISTINCT FROM $8 AS fresh
FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.place_id = $10 AND q.expires_at_ms > now_ms - $7),
judged AS (SELECT COALESCE((SELECT own.ticket FROM own), line_ticket) AS at)
SELECT (SELECT own.ticket FROM own), (SELECT own.fresh FROM own),
count(*) FILTER (WHERE q.expires_at_ms <= now_ms - $7),
count(*) FILTER (WHERE q.expires_at_ms > now_ms - $7 AND q.place_id IS DISTINCT FROM $10
AND (judged.at IS NULL OR q.ticket < judged.at
OR (q.ticket = judged.at AND q.place_id COLLATE "C" < $10 COLLATE "C")))
INTO mine, fresh, expired, ahead
FROM judged LEFT JOIN "syncguard_locks_line" q ON q.key = $1 AND q.kind = 'lock';
blocking := ahead;
END IF;
admitted := slots > blocking;
IF $9 = 'wait' THEN
IF admitted THEN
IF mine IS NOT NULL OR expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND (q.place_id = $10 OR q.expires_at_ms <= now_ms - $7);
END IF;
ELSE
IF expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.expires_at_ms <= now_ms - $7;
END IF;
IF mine IS NULL OR fresh IS NOT TRUE THEN
IF mine IS NOT NULL THEN
UPDATE "syncguard_locks_line" q SET expires_at_ms = now_ms + 5000, holder = $8
WHERE q.key = $1 AND q.kind = 'lock' AND q.place_id = $10
AND (q.expires_at_ms <= now_ms + 3334 OR q.holder IS DISTINCT FROM $8);
ELSIF line_ticket IS NULL THEN
INSERT INTO "syncguard_locks_line" AS q (key, kind, place_id, expires_at_ms, holder, shared)
VALUES ($1, 'lock', $10, now_ms + 5000, $8, false)
RETURNING q.ticket INTO line_ticket;
ELSE
INSERT INTO "syncguard_locks_line" (key, kind, place_id, ticket, expires_at_ms, holder, shared)
OVERRIDING SYSTEM VALUE
VALUES ($1, 'lock', $10, line_ticket, now_ms + 5000, $8, false);
END IF;
END IF;
places_ahead := ahead;
IF random() < 1.0 / 8 THEN
DELETE FROM "syncguard_locks_line" p WHERE p.ctid = ANY (ARRAY(
SELECT q.ctid FROM "syncguard_locks_line" q
WHERE q.expires_at_ms < now_ms - $7 - 60000
ORDER BY q.expires_at_ms LIMIT 64
FOR UPDATE SKIP LOCKED))
AND p.expires_at_ms < now_ms - $7 - 60000;
END IF;
END IF;
ELSIF admitted THEN
IF expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.expires_at_ms <= now_ms - $7;
END IF;
END IF;
IF NOT admitted THEN RETURN; END IF;
END IF;
INSERT INTO "syncguard_fence_counters" AS f (fence_key, fence, key_debug) VALUES ($5, 1, $4)
ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1
WHERE f.fence >= 0 AND f.fence < $6
RETURNING f.fence INTO counter;
IF counter IS NULL THEN
SELECT f.fence INTO bad_counter FROM "syncguard_fence_counters" f WHERE f.fence_key = $5;
RETURN;
END IF;
INSERT INTO "syncguard_locks" AS l (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)
VALUES ($1, $2, now_ms + $3, now_ms, lpad(counter::text, 15, '0'), $4,
$2 || ' ' || $8)
ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id,
expires_at_ms = EXCLUDED.expires_at_ms,
acquired_at_ms = EXCLUDED.acquired_at_ms,
fence = EXCLUDED.fence, user_key = EXCLUDED.user_key,
holder = EXCLUDED.holder
WHERE l.expires_at_ms <= EXCLUDED.acquired_at_ms - $7
OR l.lock_id = EXCLUDED.lock_id
RETURNING l.fence, l.expires_at_ms INTO fence, expires_at_ms;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_macquire_v8(text[], text[], bigint, text[], text[], bigint, bigint, text, text, text, bigint,
  OUT lock_fences text[], OUT expires_at_ms bigint, OUT ticket bigint, OUT bad_key text, OUT bad_counter bigint, OUT malformed_key text, OUT places_ahead bigint)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  now_ms bigint;
  held boolean;
  own boolean;
  malformed boolean;
  counter bigint;
  taken text;
  h integer;
  i integer;
  granted boolean := true;
  admits boolean[] := '{}';
  mines bigint[] := '{}';
  owns boolean[] := '{}';
  free_slots bigint[] := '{}';
  probes boolean[] := '{}';
  standing bigint;
  queued boolean;
  slots bigint;
  mine bigint;
  ahead bigint;
  admitted boolean;
  line_ticket bigint;
  judged_at bigint;
  fresh boolean;
  blocking bigint;
  expired bigint;
BEGIN
FOR h IN SELECT DISTINCT hashtext(k.k) FROM unnest($1) AS k(k) ORDER BY 1 LOOP
PERFORM pg_advisory_xact_lock(h);
END LOOP;
now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
FOR i IN 1 .. cardinality($1) LOOP
SELECT (l.expires_at_ms > now_ms - $7 AND l.lock_id <> $2[i]) IS TRUE
OR EXISTS (SELECT 1 FROM "syncguard_locks_shared" s WHERE s.key = $1[i]
AND s.expires_at_ms > now_ms - $7),
l.key IS NOT NULL AND NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE, l.lock_id = $2[i], EXISTS (SELECT 1 FROM "syncguard_locks_line" q WHERE q.key = $1[i] AND q.kind = 'lock')
INTO held, malformed, own, queued
FROM (SELECT 1) AS one LEFT JOIN "syncguard_locks" l ON l.key = $1[i];
IF malformed THEN malformed_key := $4[i]; RETURN; END IF;
slots := CASE WHEN held THEN 0 ELSE 1 END;
mine := NULL;
IF own IS NOT TRUE THEN
IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;
mine := NULL;
IF queued THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1[i] AND q.kind = 'lock' AND q.expires_at_ms <= now_ms - $7;
IF $9 = 'wait' THEN
SELECT q.ticket INTO mine FROM "syncguard_locks_line" q WHERE q.key = $1[i] AND q.kind = 'lock' AND q.place_id = $10;
END IF;
END IF;
END IF;
owns := owns || (own IS TRUE);
free_slots := free_slots || slots;
probes := probes || queued;
mines := mines || mine;
standing := LEAST(standing, mine);
END LOOP;
line_ticket := COALESCE(standing, $11);
FOR i IN 1 .. cardinality($1) LOOP
IF owns[i] THEN
admitted := true;
ELSE
slots := free_slots[i];
queued := probes[i];
mine := mines[i];
admitted := slots > 0;
IF queued AND $9 <> 'ignore' AND admitted THEN
judged_at := COALESCE(mine, line_ticket);
SELECT count(*) INTO ahead FROM "syncguard_locks_line" q
WHERE q.key = $1[i] AND q.kind = 'lock' AND q.place_id IS DISTINCT FROM $10
AND (judged_at IS NULL OR q.ticket < judged_at
OR (q.ticket = judged_at AND q.place_id COLLATE "C" < $10 COLLATE "C"));
admitted := slots > ahead;
END IF;
END IF;
admits := admits || admitted;
granted := granted AND admitted;
END LOOP;
IF granted THEN
FOR i IN 1 .. cardinality($1) LOOP
SELECT f.fence INTO counter FROM "syncguard_fence_counters" f WHERE f.fence_key = $5[i];
IF counter < 0 OR counter >= $6 THEN
bad_key := $4[i];
bad_counter := counter;
RETURN;
END IF;
END LOOP;
lock_fences := '{}';
FOR i IN 1 .. cardinality($1) LOOP
mine := mines[i];
IF $9 = 'wait' THEN
IF mine IS NOT NULL THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1[i] AND q.kind = 'lock' AND q.place_id = $10;
END IF;
END IF;
INSERT INTO "syncguard_fence_counters" AS f (fence_key, fence, key_debug) VALUES ($5[i], 1, $4[i])
ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1
WHERE f.fence >= 0 AND f.fence < $6
RETURNING f.fence INTO counter;
taken := NULL;
INSERT INTO "syncguard_locks" AS l (key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)
VALUES ($1[i], $2[i], now_ms + $3, now_ms, lpad(counter::text, 15, '0'), $4[i],
$2[i] || ' ' || $8)
ON CONFLICT (key) DO UPDATE SET lock_id = EXCLUDED.lock_id,
expires_at_ms = EXCLUDED.expires_at_ms,
acquired_at_ms = EXCLUDED.acquired_at_ms,
fence = EXCLUDED.fence, user_key = EXCLUDED.user_key,
holder = EXCLUDED.holder
WHERE l.expires_at_ms <= EXCLUDED.acquired_at_ms - $7
OR l.lock_id = EXCLUDED.lock_id
RETURNING l.fence, l.expires_at_ms INTO taken, expires_at_ms;
IF counter IS NULL OR taken IS NULL THEN
RAISE EXCEPTION USING ERRCODE = 'serialization_failure',
MESSAGE = 'a key of the set changed hands while it was taken: nothing was taken';
END IF;
lock_fences := lock_fences || taken;
END LOOP;
RETURN;
END IF;
IF $9 = 'wait' THEN
FOR i IN 1 .. cardinality($1) LOOP
IF NOT admits[i] OR mines[i] IS NOT NULL THEN
mine := mines[i];
IF mine IS NOT NULL THEN
UPDATE "syncguard_locks_line" q SET expires_at_ms = now_ms + 5000, holder = $8
WHERE q.key = $1[i] AND q.kind = 'lock' AND q.place_id = $10
AND (q.expires_at_ms <= now_ms + 3334 OR q.holder IS DISTINCT FROM $8);
ELSIF line_ticket IS NULL THEN
INSERT INTO "syncguard_locks_line" AS q (key, kind, place_id, expires_at_ms, holder, shared)
VALUES ($1[i], 'lock', $10, now_ms + 5000, $8, false)
RETURNING q.ticket INTO line_ticket;
ELSE
INSERT INTO "syncguard_locks_line" (key, kind, place_id, ticket, expires_at_ms, holder, shared)
OVERRIDING SYSTEM VALUE
VALUES ($1[i], 'lock', $10, line_ticket, now_ms + 5000, $8, false);
END IF;
judged_at := COALESCE(mine, line_ticket);
SELECT count(*) INTO ahead FROM "syncguard_locks_line" q
WHERE q.key = $1[i] AND q.kind = 'lock' AND q.place_id IS DISTINCT FROM $10
AND (judged_at IS NULL OR q.ticket < judged_at
OR (q.ticket = judged_at AND q.place_id COLLATE "C" < $10 COLLATE "C"));
places_ahead := GREATEST(places_ahead, ahead);
END IF;
END LOOP;
ticket := line_ticket;
IF random() < 1.0 / 8 THEN
DELETE FROM "syncguard_locks_line" p WHERE p.ctid = ANY (ARRAY(
SELECT q.ctid FROM "syncguard_locks_line" q
WHERE q.expires_at_ms < now_ms - $7 - 60000
ORDER BY q.expires_at_ms LIMIT 64
FOR UPDATE SKIP LOCKED))
AND p.expires_at_ms < now_ms - $7 - 60000;
END IF;
END IF;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_release_v8(text, bigint,
  OUT live boolean, OUT malformed_key text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  gone_expires_at_ms bigint;
  gone_key text;
BEGIN
DELETE FROM "syncguard_locks" l WHERE l.lock_id = $1 AND (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE
RETURNING l.expires_at_ms, l.user_key INTO gone_expires_at_ms, gone_key;
IF FOUND THEN
live := gone_expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2;
PERFORM pg_notify('syncguard_locks_released', gone_key);
ELSE
SELECT COALESCE(l.user_key, l.key) INTO malformed_key FROM "syncguard_locks" l
WHERE l.lock_id = $1 AND NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE;
END IF;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_extend_v8(text, bigint, bigint) RETURNS TABLE (expires_at_ms bigint, present boolean, malformed_key text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms),
renewed AS (
UPDATE "syncguard_locks" AS l SET expires_at_ms = c.now_ms + $2 FROM clock c
WHERE l.lock_id = $1 AND l.expires_at_ms > c.now_ms - $3 AND (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE
RETURNING l.expires_at_ms)
SELECT (SELECT expires_at_ms FROM renewed) AS expires_at_ms,
EXISTS (SELECT 1 FROM "syncguard_locks" WHERE lock_id = $1) AS present,
CASE WHEN NOT EXISTS (SELECT 1 FROM renewed) THEN
(SELECT COALESCE(l.user_key, l.key) FROM "syncguard_locks" l
WHERE l.lock_id = $1 AND NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE) END AS malformed_key;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_renew_v8(text[], bigint[], bigint) RETURNS TABLE (lock_id text, expires_at_ms bigint, present boolean, live boolean,
malformed_key text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms),
wanted AS (SELECT w.lock_id, w.ttl_ms
FROM unnest($1::text[], $2::bigint[]) AS w(lock_id, ttl_ms)),
target AS (
SELECT l.key, l.lock_id, w.ttl_ms
FROM "syncguard_locks" l JOIN wanted w ON l.lock_id = w.lock_id, clock c
WHERE l.expires_at_ms > c.now_ms - $3 AND (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE
FOR UPDATE OF l SKIP LOCKED),
renewed AS (
UPDATE "syncguard_locks" AS l SET expires_at_ms = c.now_ms + t.ttl_ms
FROM target t, clock c
WHERE l.key = t.key AND l.lock_id = t.lock_id
AND l.expires_at_ms > c.now_ms - $3
RETURNING l.lock_id, l.expires_at_ms)
SELECT w.lock_id, r.expires_at_ms,
x.lock_id IS NOT NULL AS present,
COALESCE(x.expires_at_ms > c.now_ms - $3, false) AS live,
CASE WHEN r.lock_id IS NULL AND x.lock_id IS NOT NULL AND NOT (x.fence ~ '^[0-9]{15}$' AND x.fence <> '000000000000000' AND x.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND x.expires_at_ms IS NOT NULL AND x.acquired_at_ms IS NOT NULL AND x.user_key IS NOT NULL) IS TRUE
THEN COALESCE(x.user_key, x.key) END AS malformed_key
FROM wanted w CROSS JOIN clock c
LEFT JOIN renewed r ON r.lock_id = w.lock_id
LEFT JOIN "syncguard_locks" x ON x.lock_id = w.lock_id;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_locked_v8(text, bigint) RETURNS TABLE (locked boolean, malformed boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY SELECT EXISTS (SELECT 1 FROM "syncguard_locks"
WHERE key = $1 AND expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2) AS locked,
(SELECT NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE FROM "syncguard_locks" l WHERE l.key = $1) AS malformed;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_sweep_v8(text, bigint, bigint) RETURNS TABLE (locked boolean, malformed boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms),
swept AS (DELETE FROM "syncguard_locks" l USING clock c
WHERE l.key = $1 AND l.expires_at_ms < c.now_ms - $3 AND (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE)
SELECT EXISTS (SELECT 1 FROM "syncguard_locks" l, clock c
WHERE l.key = $1 AND l.expires_at_ms > c.now_ms - $2) AS locked,
(SELECT NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE FROM "syncguard_locks" l WHERE l.key = $1) AS malformed;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_by_key_v8(text, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY SELECT key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, CASE WHEN left(l.holder, 23) = l.lock_id || ' ' THEN substr(l.holder, 24) END AS holder FROM "syncguard_locks" l WHERE l.key = $1
AND (l.expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2 OR NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE);
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_by_id_v8(text, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY SELECT key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, CASE WHEN left(l.holder, 23) = l.lock_id || ' ' THEN substr(l.holder, 24) END AS holder FROM "syncguard_locks" l WHERE l.lock_id = $1
AND (l.expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2 OR NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE);
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_list_v8(text, bigint, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms)
SELECT l.key, l.lock_id, l.expires_at_ms, l.acquired_at_ms, l.fence,
l.user_key, CASE WHEN left(l.holder, 23) = l.lock_id || ' ' THEN substr(l.holder, 24) END AS holder
FROM "syncguard_locks" l, clock c
WHERE starts_with(COALESCE(l.user_key, l.key), $1)
AND (l.expires_at_ms > c.now_ms - $2 OR NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE)
ORDER BY COALESCE(l.user_key, l.key) COLLATE "C"
LIMIT $3;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_pacquire_v8(text, text, bigint, text, bigint, bigint, bigint, text, text, text, bigint,
  OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT places_ahead bigint)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  now_ms bigint;
  counter bigint;
  held bigint;
  queued boolean;
  slots bigint;
  mine bigint;
  ahead bigint;
  admitted boolean;
  line_ticket bigint;
  judged_at bigint;
  fresh boolean;
  blocking bigint;
  expired bigint;
BEGIN
INSERT INTO "syncguard_locks_semaphores" AS s (key, fence, user_key) VALUES ($1, 0, $4)
ON CONFLICT (key) DO NOTHING;
SELECT s.fence INTO counter FROM "syncguard_locks_semaphores" s WHERE s.key = $1 FOR UPDATE;
now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
DELETE FROM "syncguard_locks_permits" p WHERE p.key = $1 AND p.expires_at_ms <= now_ms - $7;
IF random() < 1.0 / 8 THEN
DELETE FROM "syncguard_locks_permits" p WHERE p.ctid = ANY (ARRAY(
SELECT q.ctid FROM "syncguard_locks_permits" q
WHERE q.expires_at_ms < now_ms - $7 - 60000
ORDER BY q.expires_at_ms LIMIT 64
FOR UPDATE SKIP LOCKED))
AND p.expires_at_ms < now_ms - $7 - 60000;
END IF;
SELECT count(*), min(p.fence) FILTER (WHERE p.lock_id = $2), EXISTS (SELECT 1 FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'permit')
INTO held, fence, queued FROM "syncguard_locks_permits" p WHERE p.key = $1;
IF fence IS NOT NULL THEN
UPDATE "syncguard_locks_permits" p SET expires_at_ms = now_ms + $3
WHERE p.key = $1 AND p.lock_id = $2
RETURNING p.expires_at_ms INTO expires_at_ms;
RETURN;
END IF;
line_ticket := $11;
slots := $5 - held;
IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;
mine := NULL;
fresh := NULL;
ahead := 0;
blocking := 0;
expired := 0;
IF queued AND $9 <> 'ignore' THEN
WITH own AS (SELECT q.ticket,
q.expires_at_ms > now_ms + 3334 AND q.holder IS NOT DISTINCT FROM $8 AS fresh
FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'permit' AND q.place_id = $10 AND q.expires_at_ms > now_ms - $7),
judged AS (SELECT COALESCE((SELECT own.ticket FROM own), line_ticket) AS at)
SELECT (SELECT own.ticket FROM own), (SELECT own.fresh FROM own),
count(*) FILTER (WHERE q.expires_at_ms <= now_ms - $7),
count(*) FILTER (WHERE q.expires_at_ms > now_ms - $7 AND q.place_id IS DISTINCT FROM $10
AND (judged.at IS NULL OR q.ticket < judged.at
OR (q.ticket = judged.at AND q.place_id COLLATE "C" < $10 COLLATE "C")))
INTO mine, fresh, expired, ahead
FROM judged LEFT JOIN "syncguard_locks_line" q ON q.key = $1 AND q.kind = 'permit';
blocking := ahead;
END IF;
admitted := slots > blocking;
IF $9 = 'wait' THEN
IF admitted THEN
IF mine IS NOT NULL OR expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'permit' AND (q.place_id = $10 OR q.expires_at_ms <= now_ms - $7);
END IF;
ELSE
IF expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'permit' AND q.expires_at_ms <= now_ms - $7;
END IF;
IF mine IS NULL OR fresh IS NOT TRUE THEN
IF mine IS NOT NULL THEN
UPDATE "syncguard_locks_line" q SET expires_at_ms = now_ms + 5000, holder = $8
WHERE q.key = $1 AND q.kind = 'permit' AND q.place_id = $10
AND (q.expires_at_ms <= now_ms + 3334 OR q.holder IS DISTINCT FROM $8);
ELSIF line_ticket IS NULL THEN
INSERT INTO "syncguard_locks_line" AS q (key, kind, place_id, expires_at_ms, holder, shared)
VALUES ($1, 'permit', $10, now_ms + 5000, $8, false)
RETURNING q.ticket INTO line_ticket;
ELSE
INSERT INTO "syncguard_locks_line" (key, kind, place_id, ticket, expires_at_ms, holder, shared)
OVERRIDING SYSTEM VALUE
VALUES ($1, 'permit', $10, line_ticket, now_ms + 5000, $8, false);
END IF;
END IF;
places_ahead := ahead;
IF random() < 1.0 / 8 THEN
DELETE FROM "syncguard_locks_line" p WHERE p.ctid = ANY (ARRAY(
SELECT q.ctid FROM "syncguard_locks_line" q
WHERE q.expires_at_ms < now_ms - $7 - 60000
ORDER BY q.expires_at_ms LIMIT 64
FOR UPDATE SKIP LOCKED))
AND p.expires_at_ms < now_ms - $7 - 60000;
END IF;
END IF;
ELSIF admitted THEN
IF expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'permit' AND q.expires_at_ms <= now_ms - $7;
END IF;
END IF;
IF NOT admitted THEN RETURN; END IF;
IF counter < 0 OR counter >= $6 THEN bad_counter := counter; RETURN; END IF;
counter := counter + 1;
UPDATE "syncguard_locks_semaphores" s SET fence = counter WHERE s.key = $1;
fence := lpad(counter::text, 15, '0');
expires_at_ms := now_ms + $3;
INSERT INTO "syncguard_locks_permits"
(key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)
VALUES ($1, $2, now_ms + $3, now_ms, lpad(counter::text, 15, '0'), $4, $8);
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_prelease_v8(text, text, bigint,
  OUT live boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  gone_expires_at_ms bigint;
  gone_key text;
BEGIN
DELETE FROM "syncguard_locks_permits" p WHERE p.key = $1 AND p.lock_id = $2
RETURNING p.expires_at_ms, p.user_key INTO gone_expires_at_ms, gone_key;
IF FOUND THEN
live := gone_expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $3;
PERFORM pg_notify('syncguard_locks_released', gone_key);
END IF;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_prenew_v8(text[], text[], bigint[], bigint) RETURNS TABLE (ord bigint, expires_at_ms bigint, present boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms),
wanted AS (SELECT w.key, w.lock_id, w.ttl_ms, w.ord
FROM unnest($1::text[], $2::text[], $3::bigint[])
WITH ORDINALITY AS w(key, lock_id, ttl_ms, ord)),
renewed AS (
UPDATE "syncguard_locks_permits" AS p SET expires_at_ms = c.now_ms + w.ttl_ms
FROM wanted w, clock c
WHERE p.key = w.key AND p.lock_id = w.lock_id
AND p.expires_at_ms > c.now_ms - $4
RETURNING p.key, p.lock_id, p.expires_at_ms),
expired AS (
SELECT p.key, p.lock_id FROM "syncguard_locks_permits" p, wanted w, clock c
WHERE p.key = w.key AND p.lock_id = w.lock_id
AND p.expires_at_ms <= c.now_ms - $4)
SELECT w.ord, r.expires_at_ms,
(r.lock_id IS NOT NULL OR d.lock_id IS NOT NULL) AS present
FROM wanted w
LEFT JOIN renewed r ON r.key = w.key AND r.lock_id = w.lock_id
LEFT JOIN expired d ON d.key = w.key AND d.lock_id = w.lock_id
ORDER BY w.ord;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_permits_v8(text, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,
p.user_key, p.holder
FROM "syncguard_locks_permits" p
WHERE p.key = $1 AND p.expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2
ORDER BY p.fence COLLATE "C"
LIMIT 1000;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_plist_v8(text, bigint, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms)
SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,
p.user_key, p.holder
FROM "syncguard_locks_permits" p, clock c
WHERE starts_with(p.user_key, $1) AND p.expires_at_ms > c.now_ms - $2
ORDER BY p.user_key COLLATE "C", p.fence COLLATE "C"
LIMIT $3;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_sacquire_v8(text, text, bigint, text, text, bigint, bigint, text, text, text, bigint,
  OUT fence text, OUT expires_at_ms bigint, OUT bad_counter bigint, OUT malformed boolean, OUT places_ahead bigint)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  now_ms bigint;
  held boolean;
  counter bigint;
  queued boolean;
  slots bigint;
  mine bigint;
  ahead bigint;
  admitted boolean;
  line_ticket bigint;
  judged_at bigint;
  fresh boolean;
  blocking bigint;
  expired bigint;
BEGIN
PERFORM pg_advisory_xact_lock(hashtext($1));
now_ms := floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint;
SELECT l.expires_at_ms > now_ms - $7, l.key IS NOT NULL AND NOT (l.fence ~ '^[0-9]{15}$' AND l.fence <> '000000000000000' AND l.lock_id ~ '^[A-Za-z0-9_-]{22}$' AND l.expires_at_ms IS NOT NULL AND l.acquired_at_ms IS NOT NULL AND l.user_key IS NOT NULL) IS TRUE,
EXISTS (SELECT 1 FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock')
INTO held, malformed, queued
FROM (SELECT 1) AS one LEFT JOIN "syncguard_locks" l ON l.key = $1;
IF malformed THEN RETURN; END IF;
DELETE FROM "syncguard_locks_shared" p WHERE p.key = $1 AND p.expires_at_ms <= now_ms - $7;
IF random() < 1.0 / 8 THEN
DELETE FROM "syncguard_locks_shared" p WHERE p.ctid = ANY (ARRAY(
SELECT q.ctid FROM "syncguard_locks_shared" q
WHERE q.expires_at_ms < now_ms - $7 - 60000
ORDER BY q.expires_at_ms LIMIT 64
FOR UPDATE SKIP LOCKED))
AND p.expires_at_ms < now_ms - $7 - 60000;
END IF;
SELECT s.fence INTO fence FROM "syncguard_locks_shared" s WHERE s.key = $1 AND s.lock_id = $2;
IF fence IS NOT NULL THEN
UPDATE "syncguard_locks_shared" s SET expires_at_ms = now_ms + $3
WHERE s.key = $1 AND s.lock_id = $2
RETURNING s.expires_at_ms INTO expires_at_ms;
RETURN;
END IF;
line_ticket := $11;
slots := CASE WHEN held THEN 0 ELSE 1 END;
IF slots <= 0 AND $9 <> 'wait' THEN RETURN; END IF;
mine := NULL;
fresh := NULL;
ahead := 0;
blocking := 0;
expired := 0;
IF queued AND $9 <> 'ignore' THEN
WITH own AS (SELECT q.ticket,
q.expires_at_ms > now_ms + 3334 AND q.holder IS NOT DISTINCT FROM $8 AS fresh
FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.place_id = $10 AND q.expires_at_ms > now_ms - $7),
judged AS (SELECT COALESCE((SELECT own.ticket FROM own), line_ticket) AS at)
SELECT (SELECT own.ticket FROM own), (SELECT own.fresh FROM own),
count(*) FILTER (WHERE q.expires_at_ms <= now_ms - $7),
count(*) FILTER (WHERE q.expires_at_ms > now_ms - $7 AND q.place_id IS DISTINCT FROM $10
AND (judged.at IS NULL OR q.ticket < judged.at
OR (q.ticket = judged.at AND q.place_id COLLATE "C" < $10 COLLATE "C"))),
count(*) FILTER (WHERE q.expires_at_ms > now_ms - $7 AND q.place_id IS DISTINCT FROM $10
AND (judged.at IS NULL OR q.ticket < judged.at
OR (q.ticket = judged.at AND q.place_id COLLATE "C" < $10 COLLATE "C")) AND NOT q.shared)
INTO mine, fresh, expired, ahead, blocking
FROM judged LEFT JOIN "syncguard_locks_line" q ON q.key = $1 AND q.kind = 'lock';
END IF;
admitted := slots > blocking;
IF $9 = 'wait' THEN
IF admitted THEN
IF mine IS NOT NULL OR expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND (q.place_id = $10 OR q.expires_at_ms <= now_ms - $7);
END IF;
ELSE
IF expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.expires_at_ms <= now_ms - $7;
END IF;
IF mine IS NULL OR fresh IS NOT TRUE THEN
IF mine IS NOT NULL THEN
UPDATE "syncguard_locks_line" q SET expires_at_ms = now_ms + 5000, holder = $8
WHERE q.key = $1 AND q.kind = 'lock' AND q.place_id = $10
AND (q.expires_at_ms <= now_ms + 3334 OR q.holder IS DISTINCT FROM $8);
ELSIF line_ticket IS NULL THEN
INSERT INTO "syncguard_locks_line" AS q (key, kind, place_id, expires_at_ms, holder, shared)
VALUES ($1, 'lock', $10, now_ms + 5000, $8, true)
RETURNING q.ticket INTO line_ticket;
ELSE
INSERT INTO "syncguard_locks_line" (key, kind, place_id, ticket, expires_at_ms, holder, shared)
OVERRIDING SYSTEM VALUE
VALUES ($1, 'lock', $10, line_ticket, now_ms + 5000, $8, true);
END IF;
END IF;
places_ahead := ahead;
IF random() < 1.0 / 8 THEN
DELETE FROM "syncguard_locks_line" p WHERE p.ctid = ANY (ARRAY(
SELECT q.ctid FROM "syncguard_locks_line" q
WHERE q.expires_at_ms < now_ms - $7 - 60000
ORDER BY q.expires_at_ms LIMIT 64
FOR UPDATE SKIP LOCKED))
AND p.expires_at_ms < now_ms - $7 - 60000;
END IF;
END IF;
ELSIF admitted THEN
IF expired > 0 THEN
DELETE FROM "syncguard_locks_line" q WHERE q.key = $1 AND q.kind = 'lock' AND q.expires_at_ms <= now_ms - $7;
END IF;
END IF;
IF NOT admitted THEN RETURN; END IF;
INSERT INTO "syncguard_fence_counters" AS f (fence_key, fence, key_debug) VALUES ($5, 1, $4)
ON CONFLICT (fence_key) DO UPDATE SET fence = f.fence + 1
WHERE f.fence >= 0 AND f.fence < $6
RETURNING f.fence INTO counter;
IF counter IS NULL THEN
SELECT f.fence INTO bad_counter FROM "syncguard_fence_counters" f WHERE f.fence_key = $5;
RETURN;
END IF;
fence := lpad(counter::text, 15, '0');
expires_at_ms := now_ms + $3;
INSERT INTO "syncguard_locks_shared"
(key, lock_id, expires_at_ms, acquired_at_ms, fence, user_key, holder)
VALUES ($1, $2, now_ms + $3, now_ms, fence, $4, $8);
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_srelease_v8(text, text, bigint,
  OUT live boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
DECLARE
  gone_expires_at_ms bigint;
  gone_key text;
BEGIN
DELETE FROM "syncguard_locks_shared" p WHERE p.key = $1 AND p.lock_id = $2
RETURNING p.expires_at_ms, p.user_key INTO gone_expires_at_ms, gone_key;
IF FOUND THEN
live := gone_expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $3;
PERFORM pg_notify('syncguard_locks_released', gone_key);
END IF;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_srenew_v8(text[], text[], bigint[], bigint) RETURNS TABLE (ord bigint, expires_at_ms bigint, present boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms),
wanted AS (SELECT w.key, w.lock_id, w.ttl_ms, w.ord
FROM unnest($1::text[], $2::text[], $3::bigint[])
WITH ORDINALITY AS w(key, lock_id, ttl_ms, ord)),
renewed AS (
UPDATE "syncguard_locks_shared" AS p SET expires_at_ms = c.now_ms + w.ttl_ms
FROM wanted w, clock c
WHERE p.key = w.key AND p.lock_id = w.lock_id
AND p.expires_at_ms > c.now_ms - $4
RETURNING p.key, p.lock_id, p.expires_at_ms),
expired AS (
SELECT p.key, p.lock_id FROM "syncguard_locks_shared" p, wanted w, clock c
WHERE p.key = w.key AND p.lock_id = w.lock_id
AND p.expires_at_ms <= c.now_ms - $4)
SELECT w.ord, r.expires_at_ms,
(r.lock_id IS NOT NULL OR d.lock_id IS NOT NULL) AS present
FROM wanted w
LEFT JOIN renewed r ON r.key = w.key AND r.lock_id = w.lock_id
LEFT JOIN expired d ON d.key = w.key AND d.lock_id = w.lock_id
ORDER BY w.ord;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_readers_v8(text, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,
p.user_key, p.holder
FROM "syncguard_locks_shared" p
WHERE p.key = $1 AND p.expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $2
ORDER BY p.fence COLLATE "C"
LIMIT 10000;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_slist_v8(text, bigint, bigint) RETURNS TABLE (key text, lock_id text, expires_at_ms bigint, acquired_at_ms bigint,
fence text, user_key text, holder text)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH clock AS (SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint AS now_ms)
SELECT p.key, p.lock_id, p.expires_at_ms, p.acquired_at_ms, p.fence,
p.user_key, p.holder
FROM "syncguard_locks_shared" p, clock c
WHERE starts_with(p.user_key, $1) AND p.expires_at_ms > c.now_ms - $2
ORDER BY p.user_key COLLATE "C", p.fence COLLATE "C"
LIMIT $3;
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_line_v8(text, text, bigint) RETURNS TABLE (place_id text, ticket bigint, expires_at_ms bigint, holder text, shared boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY SELECT q.place_id, q.ticket, q.expires_at_ms, q.holder, q.shared
FROM "syncguard_locks_line" q
WHERE q.key = $1 AND q.kind = $2 AND q.expires_at_ms > floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint - $3
ORDER BY q.ticket, q.place_id COLLATE "C";
END
$syncguard$;

CREATE OR REPLACE FUNCTION syncguard_locks_leave_v8(text, text, text) RETURNS TABLE (gone boolean)
LANGUAGE plpgsql AS $syncguard$
#variable_conflict use_column
BEGIN
  RETURN QUERY WITH deleted AS (DELETE FROM "syncguard_locks_line" q
WHERE q.key = $1 AND q.kind = $2 AND q.place_id = $3 RETURNING 1)
SELECT EXISTS (SELECT 1 FROM deleted) AS gone;
END
$syncguard$;
