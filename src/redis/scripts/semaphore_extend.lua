-- KEYS: the semaphore's holders and permits
-- ARGV: lock id, tolerance ms, ttl ms, release channel, user key
-- Reply: {OK, expiresAtMs} | {NOT_FOUND} | {EXPIRED} (and removed) | {FOREIGN, key, why}
local holders_key, permits_key, lock_id = KEYS[1], KEYS[2], ARGV[1]
local tolerance, ttl = tonumber(ARGV[2]), tonumber(ARGV[3])
local permit, reply = held_permit(holders_key, permits_key, lock_id)
if not permit then return reply end
local now = now_ms()
if permit.expiresAtMs <= now - tolerance then
  -- Expired: reclaimed, never resurrected.
  remove_permit(holders_key, permits_key, lock_id)
  keep_until_last(holders_key, permits_key, now, tolerance)
  redis.call('PUBLISH', ARGV[4], ARGV[5])
  return {EXPIRED}
end
-- Replaces the remaining time: now + ttl, not expiry + ttl.
permit.expiresAtMs = now + ttl
redis.call('HSET', permits_key, lock_id, cjson.encode(permit))
redis.call('ZADD', holders_key, ms_arg(permit.expiresAtMs), lock_id)
keep_until_last(holders_key, permits_key, now, tolerance)
return {OK, permit.expiresAtMs}
