-- The lock record as it is read (after the prelude): the one rule for what a lock record is,
-- and the channel that announces a lock's release. (take.lua writes a new one.)

-- Timestamps are whole milliseconds in [0, 9e15): what JavaScript and the Rust side read
-- exactly. Infinity, NaN, fractions and strings are not.
local MAX_MS = 9e15

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

-- Tells waiting lockers (subscribed to `<lock key>:released`) that the lock on the user key
-- `key` is gone.
local function announce_release(lock_key, key)
  redis.call('PUBLISH', lock_key .. ':released', key or '')
end
