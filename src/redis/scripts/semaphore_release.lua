-- KEYS: the semaphore's holders and permits
-- ARGV: lock id, tolerance ms, release channel (the lock's of the same user key), user key
-- Reply: {OK} | {NOT_FOUND} | {EXPIRED} (removed all the same) | {FOREIGN, key, why}
local holders_key, permits_key, lock_id = KEYS[1], KEYS[2], ARGV[1]
local tolerance = tonumber(ARGV[2])
local permit, reply = held_permit(holders_key, permits_key, lock_id)
if not permit then return reply end
local now = now_ms()
remove_permit(holders_key, permits_key, lock_id)
keep_until_last(holders_key, permits_key, now, tolerance)
-- Waiters hear of it as of a lock's release: the user key on the channel the watch hears.
redis.call('PUBLISH', ARGV[3], ARGV[4])
if permit.expiresAtMs > now - tolerance then return {OK} end
return {EXPIRED}
