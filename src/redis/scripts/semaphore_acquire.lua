-- KEYS: the semaphore's holders, permits and fence counter (one hash slot)
-- ARGV: lock id, ttl ms, tolerance ms, permits (N), user key (NFC), largest fence allowed,
-- holder description (empty: none)
-- Reply: {OK, fence, expiresAtMs} | {ABSENT} (N live permits held) | {FENCE_OVERFLOW, counter
-- key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local holders_key, permits_key, fence_key = KEYS[1], KEYS[2], KEYS[3]
local lock_id, ttl, tolerance = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local permits = tonumber(ARGV[4])
local refusal = check_semaphore(holders_key, permits_key)
if refusal then return refusal end
local now = now_ms()

local mine, why = read_permit(holders_key, permits_key, lock_id)
if mine == nil then return why end
if mine and mine.expiresAtMs > now - tolerance then
  -- This very acquisition, repeated after its reply was lost (the pool repeats a call once
  -- on a dead connection): the same permit again, never a second one.
  return {OK, mine.fence, mine.expiresAtMs}
end

-- Reclaim: permits past their expiry and the tolerance no longer count.
local expired_until = ms_arg(now - tolerance)
local expired = redis.call('ZRANGEBYSCORE', holders_key, '-inf', expired_until)
for first = 1, #expired, 500 do
  redis.call('HDEL', permits_key, unpack(expired, first, math.min(first + 499, #expired)))
end
if #expired > 0 then
  redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', expired_until)
  keep_until_last(holders_key, permits_key, now, tolerance)
end

-- Each acquisition is judged by its own N.
if redis.call('ZCARD', holders_key) >= permits then return {ABSENT} end

-- The semaphore's own counter, checked before anything is written, as the lock's is.
local counter
counter, why = get_string(fence_key)
if counter == nil then return {BAD_COUNTER, fence_key, why} end
if counter then
  if not (counter == '0' or counter:match('^[1-9]%d*$')) then
    return {BAD_COUNTER, fence_key, 'it is not a non-negative integer'}
  end
  if #counter > 15 or tonumber(counter) >= tonumber(ARGV[6]) then
    return {FENCE_OVERFLOW, fence_key}
  end
end
local fence = string.format('%015d', redis.call('INCR', fence_key))
local expires_at = now + ttl
local fields = {
  lockId = lock_id, expiresAtMs = expires_at, acquiredAtMs = now, key = ARGV[5], fence = fence
}
if ARGV[7] and ARGV[7] ~= '' then fields.holder = ARGV[7] end
redis.call('HSET', permits_key, lock_id, cjson.encode(fields))
redis.call('ZADD', holders_key, ms_arg(expires_at), lock_id)
keep_until_last(holders_key, permits_key, now, tolerance)
return {OK, fence, expires_at}
