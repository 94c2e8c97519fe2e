-- KEYS: lock key
-- ARGV: tolerance ms
-- Reply: {OK, record} | {ABSENT} | {FOREIGN, key, why}. Read-only.
local lock, raw = read_lock(KEYS[1])
if lock == nil then return raw end
if not lock then return {ABSENT} end
if lock.expiresAtMs <= now_ms() - tonumber(ARGV[1]) then return {ABSENT} end
return {OK, raw}
