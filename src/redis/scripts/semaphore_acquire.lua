-- KEYS: the semaphore's holders, permits and fence counter, then its line (order, expiry,
-- places: line.lua), all in one hash slot
-- ARGV: lock id, ttl ms, tolerance ms, permits (N), user key (NFC), largest fence allowed,
-- holder description (empty: none), then the line: mode, place id, place ttl ms, line keys'
-- ttl ms
-- Reply: {OK, fence, expiresAtMs} | {ABSENT, position} (N live permits held, or no free one
-- for this caller's place in line; position: line_position) | {FENCE_OVERFLOW, counter
-- key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local holders_key, permits_key, fence_key = KEYS[1], KEYS[2], KEYS[3]
local lock_id, ttl, tolerance = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local permits = tonumber(ARGV[4])
local now, early = holder_begin(holders_key, permits_key, lock_id, tolerance)
if early then return early end

-- Reclaim: permits past their expiry and the tolerance no longer count.
reclaim_expired(holders_key, permits_key, now, tolerance)

-- Each acquisition is judged by its own N; the first in line takes the next free permit.
local line = line_of(4, 8, ARGV[7])

-- The semaphore's own counter, checked before the line or the permit is written, as the
-- lock's is.
local fence, why = holder_admit(line, permits - redis.call('ZCARD', holders_key), now, tolerance,
  fence_key, ARGV[6])
if not fence then return why end
local expires_at = now + ttl
local record = new_record(lock_id, now, expires_at, ARGV[5], fence, ARGV[7])
add_holder(holders_key, permits_key, lock_id, record, expires_at, now, tolerance)
return {OK, fence, expires_at}
