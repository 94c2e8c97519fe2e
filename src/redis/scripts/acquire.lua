-- KEYS: lock key, fence counter key, the lock's line (order, expiry, places: line.lua), the
-- lock's shared holders (a sorted set: lock id -> expiresAtMs, semaphore.lua), and in the
-- TypeScript layout the index key of the new lock id (the cluster layout writes its index
-- entry, in another hash slot, outside the script)
-- ARGV: lock id, ttl ms, tolerance ms, user key (NFC), largest fence allowed, holder description
-- (empty: none, and the record has no `holder` field, exactly as the TypeScript SyncGuard's),
-- then the line: mode, place id, place ttl ms, line keys' ttl ms
-- Reply: {OK, fence, expiresAtMs} | {ABSENT} (held by another, shared holders live, or others
-- are first in line)
-- | {FENCE_OVERFLOW, counter key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local lock_key, fence_key, readers_key, index_key = KEYS[1], KEYS[2], KEYS[6], KEYS[7]
local lock_id, ttl, tolerance = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()

local held, raw = read_lock(lock_key)
if held == nil then return raw end
local live = held and held.expiresAtMs > now - tolerance
if live and held.lockId == lock_id then
  -- This very acquisition, retried after its reply was lost: the same lease again. The
  -- record is written again, unchanged, so that a WAIT after this reply (min_replicas)
  -- counts replicas that have everything the first attempt wrote.
  redis.call('SET', lock_key, raw, 'KEEPTTL')
  return {OK, held.fence, held.expiresAtMs}
end

-- Live shared holders keep the lock from a writer as a live record does: counted by their
-- expiries alone (read only; an expired one is reclaimed by the next reader's grant).
local refusal = check_type(readers_key, 'zset')
if refusal then return refusal end
local free = 1
if live or redis.call('ZCOUNT', readers_key, '(' .. ms_arg(now - tolerance), '+inf') > 0 then
  free = 0
end
local line = line_of(3, 7, ARGV[6])
local decision
decision, refusal = line_decide(line, free, now, tolerance)
if not decision then return refusal end
if not decision.granted then
  line_write(line, decision, now)
  return {ABSENT}
end

local fence
fence, refusal = next_fence(fence_key, ARGV[5])
if not fence then return refusal end
line_write(line, decision, now)
local expires_at = now + ttl
local record = new_record(lock_id, now, expires_at, ARGV[4], fence, ARGV[6])
redis.call('SET', lock_key, record, 'PX', ttl)
if index_key then redis.call('SET', index_key, lock_key, 'PX', ttl) end
return {OK, fence, expires_at}
