-- A lock's acquisition of a key in use (after acquire_free.lua, which took a free key, read
-- the clock into `now` and ARGV into `ttl` and `tolerance`; then line.lua and lock.lua).
-- KEYS: lock key, fence counter key, the lock's line (order, expiry, places: line.lua), the
-- lock's shared holders (a sorted set: lock id -> expiresAtMs, semaphore.lua), and in the
-- TypeScript layout the index key of the new lock id (the cluster layout writes its index
-- entry, in another hash slot, outside the script)
-- ARGV: lock id, ttl ms, tolerance ms, user key (NFC), largest fence allowed, holder description
-- (empty: none, and the record has no `holder` field, exactly as the TypeScript SyncGuard's),
-- then the line: mode, place id, place ttl ms, line keys' ttl ms, ticket ('' for none)
-- Reply: {OK, fence, expiresAtMs} | {ABSENT, position} (held by another, shared holders live,
-- or others are first in line; position: line_position)
-- | {FENCE_OVERFLOW, counter key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local lock = lock_of(1, 7, ARGV[1], ARGV[4], ARGV[6], KEYS[7])
local decided, refusal = lock_decide(lock, now, tolerance)
if not decided then return refusal end
local fence
if not lock.again then
  if not lock.decision.granted then
    line_write(lock.line, lock.decision, now)
    return {ABSENT, line_position(lock.line)}
  end
  fence, refusal = take_fence(lock.fence_key, ARGV[5])
  if not fence then return refusal end
end
return {OK, lock_grant(lock, now, ttl, fence)}
