-- KEYS: index key of the lock id
-- ARGV: lock id, tolerance ms, ttl ms
-- Reply: {OK, expiresAtMs} | {NOT_FOUND} | {EXPIRED} | {FOREIGN, key, why}
local ttl = tonumber(ARGV[3])
local lock_key, lock_or_reply = resolve_owned(KEYS[1], ARGV[1], tonumber(ARGV[2]))
if not lock_key then return lock_or_reply end
local lock = lock_or_reply
-- Replaces the remaining time: now + ttl, not expiry + ttl.
lock.expiresAtMs = now_ms() + ttl
redis.call('SET', lock_key, cjson.encode(lock), 'PX', ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return {OK, lock.expiresAtMs}
