-- KEYS: index key of the lock id
-- ARGV: lock id, tolerance ms
-- Reply: {OK, record} | {ABSENT} | {FOREIGN}. Read-only: the index and the record are read in
-- one script, so the answer cannot mix two different locks.
local lock_key = redis.call('GET', KEYS[1])
if not lock_key then return {ABSENT} end
local raw = redis.call('GET', lock_key)
if not raw then return {ABSENT} end
local lock = decode_lock(raw)
if not lock then return {FOREIGN} end
if lock.lockId ~= ARGV[1] or lock.expiresAtMs <= now_ms() - tonumber(ARGV[2]) then
  return {ABSENT}
end
return {OK, raw}
