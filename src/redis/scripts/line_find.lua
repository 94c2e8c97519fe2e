-- Reads only. KEYS: a line's order, expiry and places (line.lua)
-- ARGV: tolerance ms
-- Reply: {OK, place id, ticket, expiresAtMs, holder ('' for none), shared (1 or 0), ...} for
-- each live place,
-- in ticket order | {FOREIGN, key, why}
local line = {order = KEYS[1], expiry = KEYS[2], places = KEYS[3]}
local refusal = line_refusal(line)
if refusal then return refusal end
local alive_after = now_ms() - tonumber(ARGV[1])
local reply = {OK}
local order = redis.call('ZRANGE', line.order, 0, -1, 'WITHSCORES')
for i = 1, #order, 2 do
  local place = order[i]
  local expires = redis.call('ZSCORE', line.expiry, place)
  if expires and tonumber(expires) > alive_after then
    reply[#reply + 1] = place
    reply[#reply + 1] = tonumber(order[i + 1])
    reply[#reply + 1] = tonumber(expires)
    reply[#reply + 1] = redis.call('HGET', line.places, place) or ''
    reply[#reply + 1] = redis.call('HGET', line.places, SHARED_FIELD .. place) == '1' and 1 or 0
  end
end
return reply
