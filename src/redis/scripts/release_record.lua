-- The cluster layout's release: the record only (its index entry lies in another hash slot).
-- KEYS: lock key
-- ARGV: lock id, tolerance ms
-- Reply: {OK} | {NOT_FOUND} | {EXPIRED} | {FOREIGN, key, why}
local lock_key, lock_or_reply = owned_record(KEYS[1], ARGV[1], tonumber(ARGV[2]))
if not lock_key then return lock_or_reply end
redis.call('DEL', lock_key)
announce_release(lock_key, lock_or_reply.key)
return {OK}
