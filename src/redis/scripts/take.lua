-- Granting (after the prelude): a new lock record, and taking a lock THE RULE granted, shared
-- by a free key's acquisition (acquire_free.lua) and every other grant of a lock (lock.lua).

-- The JSON record of a lock (or permit) granted now: the TypeScript SyncGuard's fields in its
-- order, and `holder` only when one is given (an extra field, which its scripts keep on extend
-- and ignore elsewhere; without one the record is exactly theirs). Written out here: cjson.encode
-- of a table costs some 40 % more; only the strings that may need escaping go through cjson
-- (the lock id and the fence never do).
local function new_record(lock_id, now, expires_at, key, fence, holder)
  local extra = ''
  if holder and holder ~= '' then extra = ',"holder":' .. cjson.encode(holder) end
  return string.format('{"fence":"%s","key":%s,"acquiredAtMs":%d,"lockId":"%s","expiresAtMs":%d%s}',
    fence, cjson.encode(key), now, lock_id, expires_at, extra)
end

-- Takes the lock at lock_key for lock_id with `fence` (take_fence's): the record and
-- (TypeScript layout: index_key) the index entry, for `ttl` ms. Its fence and expiresAtMs.
local function take_lock(lock_key, index_key, lock_id, key, holder, fence, now, ttl)
  local expires_at = now + ttl
  local record = new_record(lock_id, now, expires_at, key, fence, holder)
  redis.call('SET', lock_key, record, 'PX', ttl)
  if index_key then redis.call('SET', index_key, lock_key, 'PX', ttl) end
  return fence, expires_at
end
