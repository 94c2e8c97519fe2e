-- A leader's proclaim in the TypeScript layout: extend.lua's renewal that also replaces the
-- holder text (a script of its own, so that the heartbeat's renewal stays as it was).
-- KEYS: index key of the lock id
-- ARGV: lock id, tolerance ms, ttl ms, the new holder text
-- Reply: {OK, expiresAtMs} | {NOT_FOUND} | {EXPIRED} | {FOREIGN, key, why}
local ttl = tonumber(ARGV[3])
local lock_key, lock_or_reply = resolve_owned(KEYS[1], ARGV[1], tonumber(ARGV[2]))
if not lock_key then return lock_or_reply end
lock_or_reply.holder = ARGV[4]
local expires_at = renew_lock(lock_key, lock_or_reply, ttl)
redis.call('PEXPIRE', KEYS[1], ttl)
return {OK, expires_at}
