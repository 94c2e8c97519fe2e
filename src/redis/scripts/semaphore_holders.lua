-- Reads only. KEYS: the semaphore's holders and permits
-- ARGV: tolerance ms
-- Reply: {OK, record, record, ...} (the live permits' raw records, in no particular order)
-- | {FOREIGN, key, why}
local holders_key, permits_key = KEYS[1], KEYS[2]
local tolerance = tonumber(ARGV[1])
local refusal = check_semaphore(holders_key, permits_key)
if refusal then return refusal end
local now = now_ms()
local reply = {OK}
local live = redis.call('ZRANGEBYSCORE', holders_key, '(' .. ms_arg(now - tolerance), '+inf')
for _, lock_id in ipairs(live) do
  local permit, why = read_permit(holders_key, permits_key, lock_id)
  if permit == nil then return why end
  if permit and permit.expiresAtMs > now - tolerance then
    reply[#reply + 1] = redis.call('HGET', permits_key, lock_id)
  end
end
return reply
