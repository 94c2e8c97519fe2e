-- A holder's own lock (after the prelude and record.lua), found from its lock id: the
-- release's and the renewal's.

-- The live record under lock_key, verified to belong to lock_id (lock_key found through the
-- key or the index entry). Returns the lock key and record, or nil and the reply; an expired
-- record of lock_id is removed on the way. Another holder's record is never touched: a stale
-- index entry cannot release someone else's lock.
local function owned_record(lock_key, lock_id, tolerance)
  local lock, refusal = read_lock(lock_key)
  if lock == nil then return nil, refusal end
  if not lock then return nil, {NOT_FOUND} end
  if lock.lockId ~= lock_id then return nil, {NOT_FOUND} end
  if lock.expiresAtMs <= now_ms() - tolerance then
    redis.call('DEL', lock_key)
    announce_release(lock_key, lock.key)
    return nil, {EXPIRED}
  end
  return lock_key, lock
end

-- The live lock an index key points to, verified to belong to lock_id (the TypeScript layout).
-- Returns the lock key and record, or nil and the reply saying why not; an expired or stale
-- entry is removed on the way (never anything that belongs to another holder).
local function resolve_owned(index_key, lock_id, tolerance)
  local lock_key, why = get_string(index_key)
  if lock_key == nil then return nil, {FOREIGN, index_key, why} end
  if not lock_key then return nil, {NOT_FOUND} end
  local owned, lock_or_reply = owned_record(lock_key, lock_id, tolerance)
  if not owned and (lock_or_reply[1] == NOT_FOUND or lock_or_reply[1] == EXPIRED) then
    -- The lock is gone, expired or taken over since: only our own index entry goes.
    redis.call('DEL', index_key)
  end
  return owned, lock_or_reply
end

-- Renews the live lock `lock` stored under lock_key: its expiry becomes now + ttl (replacing
-- the remaining time, not adding to it). Its new expiresAtMs.
local function renew_lock(lock_key, lock, ttl)
  lock.expiresAtMs = now_ms() + ttl
  redis.call('SET', lock_key, cjson.encode(lock), 'PX', ttl)
  return lock.expiresAtMs
end
