-- KEYS: index key of the lock id
-- ARGV: lock id, tolerance ms
-- Reply: {OK, record} | {ABSENT} | {FOREIGN, key, why}. Read-only: the index and the record
-- are read in one script, so the answer cannot mix two different locks.
local lock_key, why = get_string(KEYS[1])
if lock_key == nil then return {FOREIGN, KEYS[1], why} end
if not lock_key then return {ABSENT} end
local lock, raw = read_lock(lock_key)
if lock == nil then return raw end
if not lock then return {ABSENT} end
if lock.lockId ~= ARGV[1] or lock.expiresAtMs <= now_ms() - tonumber(ARGV[2]) then
  return {ABSENT}
end
return {OK, raw}
