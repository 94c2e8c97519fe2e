-- Shared by every syncguard script (prepended at build time): reply codes, the clock, and
-- reading a string without a WRONGTYPE error. Redis TIME is the only clock; liveness is
-- expiresAtMs > now - tolerance, as everywhere in SyncGuard.
--
-- The other shared parts (typed.lua, record.lua, fence.lua, take.lua, owned.lua, line.lua,
-- lock.lua, semaphore.lua, break.lua) go only into the scripts that call them
-- (src/redis/scripts.rs): every `local function` is a closure made again on each call, so a
-- script carries only its own.
--
-- A key that holds no SyncGuard record answers {FOREIGN, key, why} from every script, before
-- anything is written; a fence counter that is not a counter answers {BAD_COUNTER, key, why}.
local OK, ABSENT, NOT_FOUND, EXPIRED, FENCE_OVERFLOW, BAD_COUNTER, FOREIGN = 1, 0, -1, -2, -3, -4, -9

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
