-- Shared by the semaphore scripts and the shared holders' (after the prelude, typed.lua and
-- record.lua): a set of holders, each a lease of its own. A semaphore is three keys in one hash
-- slot: the holders (a sorted set: lock id -> expiresAtMs), the permits (a hash: lock id -> JSON
-- record, of the lock record's shape) and its own fence counter (never expires, never deleted). The
-- record is the truth about a permit; the sorted set counts and reclaims. The shared holders
-- (readers) of a lock are the same two keys (holders, records) beside the lock, whose counter they
-- use.

local function check_semaphore(holders_key, permits_key)
  return check_type(holders_key, 'zset') or check_type(permits_key, 'hash')
end

-- The permit held under lock_id: its record, false when there is none, or nil and the reply
-- that refuses what is stored.
local function read_permit(holders_key, permits_key, lock_id)
  local raw = redis.call('HGET', permits_key, lock_id)
  if not raw then
    if redis.call('ZSCORE', holders_key, lock_id) then
      return nil, {FOREIGN, holders_key, 'it names a holder that has no record'}
    end
    return false
  end
  local permit, why = decode_lock(raw)
  if not permit then return nil, {FOREIGN, permits_key, 'a holder record: ' .. why} end
  if permit.lockId ~= lock_id then
    return nil, {FOREIGN, permits_key, 'a holder record is filed under another lock id'}
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

-- Reclaims the holders past their expiry and the tolerance: they no longer count, and their
-- records go.
local function reclaim_expired(holders_key, permits_key, now, tolerance)
  local expired_until = ms_arg(now - tolerance)
  local expired = redis.call('ZRANGEBYSCORE', holders_key, '-inf', expired_until)
  for first = 1, #expired, 500 do
    redis.call('HDEL', permits_key, unpack(expired, first, math.min(first + 499, #expired)))
  end
  if #expired > 0 then
    redis.call('ZREMRANGEBYSCORE', holders_key, '-inf', expired_until)
    keep_until_last(holders_key, permits_key, now, tolerance)
  end
end

-- The repeat of an acquisition whose reply was lost (the pool repeats a call once on a dead
-- connection) finds its own live holder: the same hold again, never a second one. The record
-- is written again, unchanged, so that a WAIT after this reply (min_replicas) counts replicas
-- that have everything the first attempt wrote: a connection that wrote nothing has nothing to
-- wait for. The reply, or nil when `mine` (read_permit's) is no live holder.
local function repeated_grant(permits_key, lock_id, mine, now, tolerance)
  if not (mine and mine.expiresAtMs > now - tolerance) then return nil end
  redis.call('HSET', permits_key, lock_id, redis.call('HGET', permits_key, lock_id))
  return {OK, mine.fence, mine.expiresAtMs}
end

-- Grants a holder: its record and its place in the holders, which then live as long as their
-- longest-lived holder.
local function add_holder(holders_key, permits_key, lock_id, record, expires_at, now, tolerance)
  redis.call('HSET', permits_key, lock_id, record)
  redis.call('ZADD', holders_key, ms_arg(expires_at), lock_id)
  keep_until_last(holders_key, permits_key, now, tolerance)
end
