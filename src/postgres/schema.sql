-- syncguard (Rust) and SyncGuard (TypeScript) share these tables: same names, columns, types
-- and indexes. Apply once, e.g. `psql -d myapp -f schema.sql`, or call
-- syncguard::postgres::setup_schema. Safe to run again.
--
-- For other table names, replace "syncguard_locks" and "syncguard_fence_counters" throughout
-- (index names follow the lock table's name), or use syncguard::postgres::schema_sql.

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
