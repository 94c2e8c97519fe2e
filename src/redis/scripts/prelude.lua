-- Shared by every syncguard script (prepended at build time): reply codes, the clock, and the
-- one rule for what a lock record is. Redis TIME is the only clock; liveness is
-- expiresAtMs > now - tolerance, as everywhere in SyncGuard.
--
-- A key that holds no SyncGuard record answers {FOREIGN, key, why} from every script, before
-- anything is written; a fence counter that is not a counter answers {BAD_COUNTER, key, why}.
local OK, ABSENT, NOT_FOUND, EXPIRED, FENCE_OVERFLOW, BAD_COUNTER, FOREIGN = 1, 0, -1, -2, -3, -4, -9

-- Timestamps are whole milliseconds in [0, 9e15): what JavaScript and the Rust side read
-- exactly. Infinity, NaN, fractions and strings are not.
local MAX_MS = 9e15

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The string stored at key (false when there is none), or nil and the reason when the key
-- holds another Redis type: a WRONGTYPE error would abort the script without saying which key.
local function get_string(key)
  local value = redis.pcall('GET', key)
  if type(value) == 'table' and value.err then
    return nil, 'it holds a Redis ' .. redis.call('TYPE', key).ok .. ', not a string'
  end
  return value
end

-- Lua numbers as Redis arguments: whole milliseconds, never in exponent notation.
local function ms_arg(ms)
  return string.format('%d', ms)
end

-- {FOREIGN, key, why} when key holds a Redis type other than wanted (an empty key is fine):
-- a WRONGTYPE error would abort the script without naming the key.
local function check_type(key, wanted)
  local found = redis.call('TYPE', key).ok
  if found ~= 'none' and found ~= wanted then
    return {FOREIGN, key, 'it holds a Redis ' .. found .. ', not a ' .. wanted}
  end
  return nil
end

local function whole_ms(value)
  return type(value) == 'number' and value == value and value >= 0 and value < MAX_MS
    and math.floor(value) == value
end

-- The lock record in raw (the text stored under a lock key), or nil and why it is none. A
-- SyncGuard record (the TypeScript SyncGuard's, field for field) is a JSON object with a
-- 22-character base64url lockId, whole-millisecond expiresAtMs and acquiredAtMs, a non-empty
-- key and a 15-digit fence other than zero; further fields are kept as they are.
local function decode_lock(raw)
  local decoded, lock = pcall(cjson.decode, raw)
  if not decoded then return nil, 'it is not JSON' end
  if type(lock) ~= 'table' then return nil, 'it is not a JSON object' end
  local id = lock.lockId
  if type(id) ~= 'string' or #id ~= 22 or not id:match('^[A-Za-z0-9_%-]+$') then
    return nil, 'its lockId is missing or not a lock id'
  end
  if not whole_ms(lock.expiresAtMs) then
    return nil, 'its expiresAtMs is missing or not a whole number of milliseconds'
  end
  if not whole_ms(lock.acquiredAtMs) then
    return nil, 'its acquiredAtMs is missing or not a whole number of milliseconds'
  end
  if type(lock.key) ~= 'string' or lock.key == '' then
    return nil, 'its key is missing or not a string'
  end
  local fence = lock.fence
  if type(fence) ~= 'string' or #fence ~= 15 or not fence:match('^%d+$')
      or fence == '000000000000000' then
    return nil, 'its fence is missing or not 15 digits'
  end
  return lock
end

-- The record under lock_key: the record, false when the key is empty, or nil and the reply
-- that refuses it ({FOREIGN, lock_key, why}).
local function read_lock(lock_key)
  local raw, why = get_string(lock_key)
  if raw == nil then return nil, {FOREIGN, lock_key, why} end
  if not raw then return false end
  local lock
  lock, why = decode_lock(raw)
  if not lock then return nil, {FOREIGN, lock_key, why} end
  return lock, raw
end

-- The refusal of the fence counter at fence_key ({BAD_COUNTER, key, why} or
-- {FENCE_OVERFLOW, key}), or nil when it may issue the next fence. Reads only: a counter that
-- is not one (negative, not an integer, another type) or has reached `largest` leaves every
-- key as it was.
local function fence_refusal(fence_key, largest)
  local counter, why = get_string(fence_key)
  if counter == nil then return {BAD_COUNTER, fence_key, why} end
  if counter then
    if not (counter == '0' or counter:match('^[1-9]%d*$')) then
      return {BAD_COUNTER, fence_key, 'it is not a non-negative integer'}
    end
    if #counter > 15 or tonumber(counter) >= tonumber(largest) then
      return {FENCE_OVERFLOW, fence_key}
    end
  end
  return nil
end

-- Issues the next fence of the counter at fence_key (incremented), checked by fence_refusal
-- first. A counter only ever grows, has no TTL and is never deleted.
local function issue_fence(fence_key)
  return string.format('%015d', redis.call('INCR', fence_key))
end

-- The next fence of the counter at fence_key (incremented), or nil and the reply that refuses
-- it (fence_refusal), checked before anything is written.
local function next_fence(fence_key, largest)
  local refusal = fence_refusal(fence_key, largest)
  if refusal then return nil, refusal end
  return issue_fence(fence_key)
end

-- The JSON record of a lock (or permit) granted now: the TypeScript SyncGuard's fields, and
-- `holder` only when one is given (an extra field, which its scripts keep on extend and ignore
-- elsewhere; without one the record is exactly theirs).
local function new_record(lock_id, now, expires_at, key, fence, holder)
  local fields = {
    lockId = lock_id, expiresAtMs = expires_at, acquiredAtMs = now, key = key, fence = fence
  }
  if holder and holder ~= '' then fields.holder = holder end
  return cjson.encode(fields)
end

-- Tells waiting lockers (subscribed to `<lock key>:released`) that the lock on the user key
-- `key` is gone.
local function announce_release(lock_key, key)
  redis.call('PUBLISH', lock_key .. ':released', key or '')
end

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
