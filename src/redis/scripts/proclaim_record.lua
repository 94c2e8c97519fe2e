-- A leader's proclaim in the cluster layout: extend_record.lua's renewal that also replaces the
-- holder text (the record only: its index entry lies in another hash slot).
-- KEYS: lock key
-- ARGV: lock id, tolerance ms, ttl ms, the new holder text
-- Reply: {OK, expiresAtMs} | {NOT_FOUND} | {EXPIRED} | {FOREIGN, key, why}
local lock_key, lock_or_reply = owned_record(KEYS[1], ARGV[1], tonumber(ARGV[2]))
if not lock_key then return lock_or_reply end
lock_or_reply.holder = ARGV[4]
return {OK, renew_lock(lock_key, lock_or_reply, tonumber(ARGV[3]))}
