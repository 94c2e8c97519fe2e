-- KEYS: lock key
-- ARGV: tolerance ms, cleanup ('1' or '0'), what precedes a lock id in its index key (empty:
-- leave the index entry alone), cleanup guard ms
-- Reply: {OK} (live) | {ABSENT} | {FOREIGN, key, why}
local lock, refusal = read_lock(KEYS[1])
if lock == nil then return refusal end
if not lock then return {ABSENT} end
local now = now_ms()
if lock.expiresAtMs > now - tonumber(ARGV[1]) then return {OK} end
-- Opt-in cleanup, only well past expiry so that it can never race a renewal.
if ARGV[2] == '1' and now - lock.expiresAtMs > tonumber(ARGV[4]) then
  redis.call('DEL', KEYS[1])
  -- The cluster layout's index entry lies in another slot (ARGV[3] empty): it expires alone.
  if ARGV[3] ~= '' then redis.call('DEL', ARGV[3] .. lock.lockId) end
  announce_release(KEYS[1], lock.key)
end
return {ABSENT}
