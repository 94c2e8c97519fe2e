-- The cluster layout's extend: the record only (its index entry lies in another hash slot).
-- KEYS: lock key
-- ARGV: lock id, tolerance ms, ttl ms
-- Reply: {OK, expiresAtMs} | {NOT_FOUND} | {EXPIRED} | {FOREIGN, key, why}
local lock_key, lock_or_reply = owned_record(KEYS[1], ARGV[1], tonumber(ARGV[2]))
if not lock_key then return lock_or_reply end
return {OK, renew_lock(lock_key, lock_or_reply, tonumber(ARGV[3]))}
