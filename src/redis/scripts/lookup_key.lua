-- KEYS: lock key
-- ARGV: tolerance ms
-- Reply: {OK, record} | {ABSENT} | {FOREIGN}. Read-only.
local raw = redis.call('GET', KEYS[1])
if not raw then return {ABSENT} end
local lock = decode_lock(raw)
if not lock then return {FOREIGN} end
if lock.expiresAtMs <= now_ms() - tonumber(ARGV[1]) then return {ABSENT} end
return {OK, raw}
