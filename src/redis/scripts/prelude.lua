-- Shared by every syncguard script (prepended at build time): reply codes, the clock, and the
-- decoder of lock records. Redis TIME is the only clock; liveness is
-- expiresAtMs > now - tolerance, as everywhere in SyncGuard.
local OK, ABSENT, NOT_FOUND, EXPIRED, FENCE_OVERFLOW, FOREIGN = 1, 0, -1, -2, -3, -9

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The lock record stored under a lock key, or nil when the value is not a SyncGuard lock.
local function decode_lock(raw)
  local decoded, lock = pcall(cjson.decode, raw)
  if decoded and type(lock) == 'table' and type(lock.lockId) == 'string'
      and type(lock.expiresAtMs) == 'number' then
    return lock
  end
  return nil
end

-- Tells waiting lockers (subscribed to `<lock key>:released`) that the lock on the user key
-- `key` is gone.
local function announce_release(lock_key, key)
  redis.call('PUBLISH', lock_key .. ':released', key or '')
end

-- The live lock an index key points to, verified to belong to lock_id.
-- Returns the lock key and record, or nil and the reply code saying why not; an expired or
-- stale entry is removed on the way (never anything that belongs to another holder).
local function resolve_owned(index_key, lock_id, tolerance)
  local lock_key = redis.call('GET', index_key)
  if not lock_key then return nil, NOT_FOUND end
  local raw = redis.call('GET', lock_key)
  if not raw then
    redis.call('DEL', index_key)
    return nil, NOT_FOUND
  end
  local lock = decode_lock(raw)
  if not lock then return nil, FOREIGN end
  if lock.lockId ~= lock_id then
    -- The key was taken over since: only our own stale index entry goes.
    redis.call('DEL', index_key)
    return nil, NOT_FOUND
  end
  if lock.expiresAtMs <= now_ms() - tolerance then
    redis.call('DEL', lock_key, index_key)
    announce_release(lock_key, lock.key)
    return nil, EXPIRED
  end
  return lock_key, lock
end

-- The live record under lock_key, verified to belong to lock_id (the cluster layout, where the
-- caller found lock_key through the key or the index entry). Returns the lock key and record,
-- or nil and the reply code; an expired record of lock_id is removed on the way. Another
-- holder's record is never touched: a stale index entry cannot release someone else's lock.
local function owned_record(lock_key, lock_id, tolerance)
  local raw = redis.call('GET', lock_key)
  if not raw then return nil, NOT_FOUND end
  local lock = decode_lock(raw)
  if not lock then return nil, FOREIGN end
  if lock.lockId ~= lock_id then return nil, NOT_FOUND end
  if lock.expiresAtMs <= now_ms() - tolerance then
    redis.call('DEL', lock_key)
    announce_release(lock_key, lock.key)
    return nil, EXPIRED
  end
  return lock_key, lock
end
