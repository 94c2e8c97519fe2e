-- The acquisition of a lock begins here (KEYS and ARGV: acquire.lua's, which ends it). A key
-- free of everything THE RULE reads (no record, no shared holder, no line) is taken at once,
-- with one read (EXISTS) where the rule needs none, and before line.lua and lock.lua are
-- defined (each of their functions a closure made on every call): an uncontended acquisition
-- runs TIME, EXISTS, INCR (the fence), SET (the record) and SET (the index entry, TypeScript
-- layout). A key in use goes on to acquire.lua.
local ttl, tolerance = tonumber(ARGV[2]), tonumber(ARGV[3])
local now = now_ms()
if redis.call('EXISTS', KEYS[1], KEYS[3], KEYS[6]) == 0 then
  local fence, refusal = take_fence(KEYS[2], ARGV[5])
  if not fence then return refusal end
  return {OK, take_lock(KEYS[1], KEYS[7], ARGV[1], ARGV[4], ARGV[6], fence, now, ttl)}
end
