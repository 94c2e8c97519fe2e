-- KEYS: lock key, fence counter key, the lock's line (order, expiry, places: line.lua), the
-- lock's shared holders and their records (semaphore.lua), all in the lock's hash slot
-- ARGV: lock id, ttl ms, tolerance ms, user key (NFC), largest fence allowed, holder
-- description (empty: none), then the line: mode, place id, place ttl ms, line keys' ttl ms
-- Reply: {OK, fence, expiresAtMs} | {ABSENT, position} (a live exclusive lock, or a writer
-- ahead in line; position: line_position) | {FENCE_OVERFLOW, counter key} | {BAD_COUNTER,
-- counter key, why} | {FOREIGN, key, why}
local lock_key, fence_key, holders_key, records_key = KEYS[1], KEYS[2], KEYS[6], KEYS[7]
local lock_id, ttl, tolerance = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now, early = holder_begin(holders_key, records_key, lock_id, tolerance)
if early then return early end

-- Other readers never stand in a reader's way: only a live exclusive lock, or a writer ahead.
local held, why = read_lock(lock_key)
if held == nil then return why end
local exclusive = held and held.expiresAtMs > now - tolerance
local line = line_of(3, 7, ARGV[6], true)
-- The lock's own counter: fences order every grant of the key, shared or exclusive.
local fence
fence, why = holder_admit(line, exclusive and 0 or 1, now, tolerance, fence_key, ARGV[5])
if not fence then return why end
reclaim_expired(holders_key, records_key, now, tolerance)
local expires_at = now + ttl
local record = new_record(lock_id, now, expires_at, ARGV[4], fence, ARGV[6])
add_holder(holders_key, records_key, lock_id, record, expires_at, now, tolerance)
return {OK, fence, expires_at}
