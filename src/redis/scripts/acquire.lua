-- KEYS: lock key, fence counter key, and in the TypeScript layout the index key of the new lock
-- id (the cluster layout writes its index entry, in another hash slot, outside the script)
-- ARGV: lock id, ttl ms, tolerance ms, user key (NFC), largest fence allowed, holder description
-- (empty: none, and the record has no `holder` field, exactly as the TypeScript SyncGuard's)
-- Reply: {OK, fence, expiresAtMs} | {ABSENT} (held by another) | {FENCE_OVERFLOW, counter key}
-- | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local lock_key, fence_key, index_key = KEYS[1], KEYS[2], KEYS[3]
local lock_id, ttl, tolerance = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()

local held, raw = read_lock(lock_key)
if held == nil then return raw end
if held and held.expiresAtMs > now - tolerance then
  if held.lockId == lock_id then
    -- This very acquisition, retried after its reply was lost: the same lease again. The
    -- record is written again, unchanged, so that a WAIT after this reply (min_replicas)
    -- counts replicas that have everything the first attempt wrote.
    redis.call('SET', lock_key, raw, 'KEEPTTL')
    return {OK, held.fence, held.expiresAtMs}
  end
  return {ABSENT}
end

local fence, refusal = next_fence(fence_key, ARGV[5])
if not fence then return refusal end
local expires_at = now + ttl
local record = new_record(lock_id, now, expires_at, ARGV[4], fence, ARGV[6])
redis.call('SET', lock_key, record, 'PX', ttl)
if index_key then redis.call('SET', index_key, lock_key, 'PX', ttl) end
return {OK, fence, expires_at}
