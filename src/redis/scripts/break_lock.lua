-- An operator's break of a lock: its live holder, whatever its lock id, replaced by a marker.
-- KEYS: lock key, fence counter key, and in the TypeScript layout the index key of the
-- marker's lock id (the cluster layout writes index entries, in other hash slots, outside the
-- script)
-- ARGV: tolerance ms, user key (NFC), largest fence allowed, delay ('rest', 'none' or ms:
-- marker_expiry), the marker's holder text, only this lock id ('' for any holder), index head
-- (TypeScript layout: what precedes a lock id in its index key; '' in the cluster layout),
-- marker lock id
-- Reply: {OK} (nothing live broken; an expired holder is removed all the same) | {OK, ''}
-- (this very break was applied already: its marker holds the key)
-- | {OK, holder record} (broken, no marker) | {OK, holder record, marker record}
-- | {FENCE_OVERFLOW, counter key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local lock_key, fence_key, marker_index = KEYS[1], KEYS[2], KEYS[3]
local tolerance, key, largest = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local delay, note, only, index_head, marker_id = ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]

local held, raw = read_lock(lock_key)
if held == nil then return raw end
-- The pool sends a call again on a connection found dropped, which may have run it: a repeat
-- finds its own marker, says so, and breaks nothing more.
if held and held.lockId == marker_id then return {OK, ''} end
if not held or not breaks(held.lockId, only) then return {OK} end
local now = now_ms()
local live = held.expiresAtMs > now - tolerance
local expires_at = live and marker_expiry(delay, held.expiresAtMs, now)
if expires_at then
  -- Checked before anything is removed: a break that cannot leave its marker leaves the
  -- holder as it was.
  local refusal = fence_refusal(fence_key, largest)
  if refusal then return refusal end
end
redis.call('DEL', lock_key)
if index_head ~= '' then redis.call('DEL', index_head .. held.lockId) end
if not live then return {OK} end
local reply = {OK, raw}
if expires_at then
  -- An ordinary record with its TTL, as an acquisition writes it: every client, the
  -- TypeScript SyncGuard's included, sees the key held until the marker expires.
  local ttl = ms_arg(expires_at - now)
  local record = new_record(marker_id, now, expires_at, key, issue_fence(fence_key), note)
  redis.call('SET', lock_key, record, 'PX', ttl)
  if marker_index then redis.call('SET', marker_index, lock_key, 'PX', ttl) end
  reply[3] = record
end
announce_release(lock_key, held.key)
return reply
