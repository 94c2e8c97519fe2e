-- Shared by the semaphore scripts (after the prelude). A semaphore is three keys in one hash
-- slot: the holders (a sorted set: lock id -> expiresAtMs), the permits (a hash: lock id ->
-- JSON record, of the lock record's shape) and its own fence counter (never expires, never
-- deleted). The record is the truth about a permit; the sorted set counts and reclaims.

local function check_semaphore(holders_key, permits_key)
  return check_type(holders_key, 'zset') or check_type(permits_key, 'hash')
end

-- The permit held under lock_id: its record, false when there is none, or nil and the reply
-- that refuses what is stored.
local function read_permit(holders_key, permits_key, lock_id)
  local raw = redis.call('HGET', permits_key, lock_id)
  if not raw then
    if redis.call('ZSCORE', holders_key, lock_id) then
      return nil, {FOREIGN, holders_key, 'it names a permit that has no record'}
    end
    return false
  end
  local permit, why = decode_lock(raw)
  if not permit then return nil, {FOREIGN, permits_key, 'a permit record: ' .. why} end
  if permit.lockId ~= lock_id then
    return nil, {FOREIGN, permits_key, 'a permit record is filed under another lock id'}
  end
  return permit
end

-- The permit a renewal or release of lock_id acts on: its record, or nil and the reply that
-- says why not (NOT_FOUND when there is none, or the refusal of what is stored).
local function held_permit(holders_key, permits_key, lock_id)
  local refusal = check_semaphore(holders_key, permits_key)
  if refusal then return nil, refusal end
  local permit, why = read_permit(holders_key, permits_key, lock_id)
  if permit == nil then return nil, why end
  if not permit then return nil, {NOT_FOUND} end
  return permit
end

local function remove_permit(holders_key, permits_key, lock_id)
  redis.call('ZREM', holders_key, lock_id)
  redis.call('HDEL', permits_key, lock_id)
end

-- How long the holders and permits outlive their last permit's expiry and tolerance: a late
-- renewal or release in that time learns that its permit expired (EXPIRED), not NOT_FOUND.
local KEEP_EXPIRED_MS = 10000

-- Keeps the holders and the permits as long as their longest-lived permit (the tolerance and
-- KEEP_EXPIRED_MS included), so that an abandoned semaphore leaves nothing but its fence
-- counter behind.
local function keep_until_last(holders_key, permits_key, now, tolerance)
  local last = redis.call('ZRANGE', holders_key, -1, -1, 'WITHSCORES')
  if #last == 0 then
    redis.call('DEL', holders_key, permits_key)
    return
  end
  local ttl = math.max(1, tonumber(last[2]) + tolerance + KEEP_EXPIRED_MS - now)
  redis.call('PEXPIRE', holders_key, ms_arg(ttl))
  redis.call('PEXPIRE', permits_key, ms_arg(ttl))
end
