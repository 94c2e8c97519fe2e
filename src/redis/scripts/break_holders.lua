-- An operator's break of a holder set (a semaphore's permits, or a lock's shared holders):
-- its live holders, whatever their lock ids, each replaced by a marker of its own.
-- KEYS: the holders and their records (semaphore.lua), and the fence counter their grants
-- draw from (the semaphore's, or the lock's), in one hash slot
-- ARGV: tolerance ms, user key (NFC), largest fence allowed, delay ('rest', 'none' or ms:
-- marker_expiry), the markers' holder text, only this lock id ('' for every holder), release
-- channel, then the markers' lock ids (drawn by the client, one per marker at most)
-- Reply: {OK, short} with short > 0: that many more marker lock ids are needed, and nothing
-- was written | {OK, -1}: this very break was applied already (one of its markers is held) | {OK, 0, n, n holder records (fence order), marker records (same order)}
-- | {FENCE_OVERFLOW, counter key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local holders_key, records_key, fence_key = KEYS[1], KEYS[2], KEYS[3]
local tolerance, key, largest = tonumber(ARGV[1]), ARGV[2], ARGV[3]
local delay, note, only, channel = ARGV[4], ARGV[5], ARGV[6], ARGV[7]
local FIRST_MARKER_ID = 8

local refusal = check_semaphore(holders_key, records_key)
if refusal then return refusal end
-- The pool sends a call again on a connection found dropped, which may have run it: a repeat
-- finds its own markers, says so, and breaks nothing more.
for i = FIRST_MARKER_ID, #ARGV do
  if redis.call('HEXISTS', records_key, ARGV[i]) == 1 then return {OK, -1} end
end
local now = now_ms()
local candidates = {only}
if only == '' then candidates = redis.call('ZRANGE', holders_key, 0, -1) end
-- Every holder broken (expired ones are removed and not answered), and the live ones.
local taken, live = {}, {}
for _, lock_id in ipairs(candidates) do
  if breaks(lock_id, only) then
    local held, why = read_permit(holders_key, records_key, lock_id)
    if held == nil then return why end
    if held then
      taken[#taken + 1] = lock_id
      if held.expiresAtMs > now - tolerance then
        live[#live + 1] = {record = held, raw = redis.call('HGET', records_key, lock_id)}
      end
    end
  end
end
if #taken == 0 then return {OK, 0, 0} end

local markers = 0
if delay ~= 'none' then markers = #live end
local short = markers - (#ARGV - FIRST_MARKER_ID + 1)
if short > 0 then return {OK, short} end
if markers > 0 then
  refusal = fence_refusal(fence_key, largest)
  if refusal then return refusal end
  if tonumber(redis.call('GET', fence_key) or '0') + markers > tonumber(largest) then
    return {FENCE_OVERFLOW, fence_key}
  end
end

for _, lock_id in ipairs(taken) do remove_permit(holders_key, records_key, lock_id) end
-- Fences are 15-digit strings: their order is their numbers'.
table.sort(live, function(a, b) return a.record.fence < b.record.fence end)
local reply = {OK, 0, #live}
for _, holder in ipairs(live) do reply[#reply + 1] = holder.raw end
for i, holder in ipairs(live) do
  local expires_at = marker_expiry(delay, holder.record.expiresAtMs, now)
  if expires_at then
    local marker_id = ARGV[FIRST_MARKER_ID + i - 1]
    local record = new_record(marker_id, now, expires_at, key, issue_fence(fence_key), note)
    add_holder(holders_key, records_key, marker_id, record, expires_at, now, tolerance)
    reply[#reply + 1] = record
  end
end
keep_until_last(holders_key, records_key, now, tolerance)
if #live > 0 then redis.call('PUBLISH', channel, key) end
return reply
