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

-- The counter only ever grows, has no TTL and is never deleted. It is checked before
-- anything is written: a counter that is not one (negative, not an integer, another type)
-- or has reached the limit leaves every key as it was.
local counter, why = get_string(fence_key)
if counter == nil then return {BAD_COUNTER, fence_key, why} end
if counter then
  if not (counter == '0' or counter:match('^[1-9]%d*$')) then
    return {BAD_COUNTER, fence_key, 'it is not a non-negative integer'}
  end
  if #counter > 15 or tonumber(counter) >= tonumber(ARGV[5]) then
    return {FENCE_OVERFLOW, fence_key}
  end
end
local fence = string.format('%015d', redis.call('INCR', fence_key))
local expires_at = now + ttl
local fields = {
  lockId = lock_id, expiresAtMs = expires_at, acquiredAtMs = now, key = ARGV[4], fence = fence
}
-- An extra field, which the TypeScript SyncGuard's scripts keep on extend and ignore elsewhere.
if ARGV[6] and ARGV[6] ~= '' then fields.holder = ARGV[6] end
local record = cjson.encode(fields)
redis.call('SET', lock_key, record, 'PX', ttl)
if index_key then redis.call('SET', index_key, lock_key, 'PX', ttl) end
return {OK, fence, expires_at}
