-- Keys of the other Redis types (after the prelude): the line's and the holders' sorted sets
-- and hashes, their types checked and their scores written.

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
