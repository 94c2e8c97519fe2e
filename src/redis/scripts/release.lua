-- KEYS: index key of the lock id
-- ARGV: lock id, tolerance ms
-- Reply: {OK} | {NOT_FOUND} | {EXPIRED} | {FOREIGN, key, why}
local lock_key, lock_or_reply = resolve_owned(KEYS[1], ARGV[1], tonumber(ARGV[2]))
if not lock_key then return lock_or_reply end
redis.call('DEL', lock_key, KEYS[1])
announce_release(lock_key, lock_or_reply.key)
return {OK}
