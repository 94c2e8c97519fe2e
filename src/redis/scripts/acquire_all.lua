-- The locks of several keys at once, all or none (THE RULE for a set: admit_all in
-- src/line.rs), each key decided and taken as acquire.lua takes one (lock.lua).
-- KEYS: per key, `stride` keys: lock key, fence counter key, the lock's line (order, expiry,
-- places), the lock's shared holders, and in the TypeScript layout (stride 7) the index key of
-- its new lock id
-- ARGV: ttl ms, tolerance ms, largest fence allowed, holder description (empty: none), stride,
-- the line (mode, place id, place ttl ms, line keys' ttl ms, ticket ('' for none)), then per
-- key: its new lock id, its user key (NFC)
-- Reply: {OK, fence, expiresAtMs, ...} one pair per key in KEYS' order | {ABSENT, ticket,
-- position} (a key held, or its line goes first; the ticket its places carry, '' unless
-- waiting; the most places ahead of its own on a line where it stands, -1 for none) |
-- {FENCE_OVERFLOW, counter key} | {BAD_COUNTER, counter key, why} | {FOREIGN, key, why}
local ttl, tolerance, largest = tonumber(ARGV[1]), tonumber(ARGV[2]), ARGV[3]
local holder, stride = ARGV[4], tonumber(ARGV[5])
local now = now_ms()

local locks = {}
for i = 0, #KEYS / stride - 1 do
  local k, a = i * stride + 1, 11 + 2 * i
  local index_key = stride == 7 and KEYS[k + 6] or nil
  locks[#locks + 1] = lock_of(k, 6, ARGV[a], ARGV[a + 1], holder, index_key)
end

-- 1. The ticket, one for the whole wait: the one its places carry where it stands already (a
-- request repeated, or retried after its answer was lost, finds them; the lowest if they
-- differ), else the one the waiter carries, else, at its first refusal, one above the highest
-- last ticket of the set's lines.
local waiting = locks[1].line.mode == 'wait'
if waiting then
  local standing, fresh = nil, 1
  for _, lock in ipairs(locks) do
    local refusal = line_refusal(lock.line)
    if refusal then return refusal end
    local mine = line_standing(lock.line, now, tolerance)
    if mine and (not standing or mine < standing) then standing = mine end
    fresh = math.max(fresh, line_next_ticket(lock.line))
  end
  local ticket = standing or locks[1].line.ticket or fresh
  for _, lock in ipairs(locks) do lock.line.ticket = ticket end
end

-- 2. Every key decided, nothing written (a refusal of what is stored leaves every key as it
-- was).
local granted = true
for _, lock in ipairs(locks) do
  local decided, refusal = lock_decide(lock, now, tolerance)
  if not decided then return refusal end
  granted = granted and (lock.again ~= nil or lock.decision.granted)
end

-- 4. Refused: nothing taken; the place (with the ticket) taken or renewed on every key that
-- did not admit it and on every key where it stands already; expired places pruned
-- everywhere.
if not granted then
  local position = -1
  for _, lock in ipairs(locks) do
    if lock.again then
      -- Taken by an earlier send of this very request, and another key is no longer free
      -- (its lock lapsed in between): given back, so that the answer holds for every key.
      redis.call('DEL', lock.lock_key)
      if lock.index_key then redis.call('DEL', lock.index_key) end
      announce_release(lock.lock_key, lock.key)
    else
      local decision = lock.decision
      decision.granted = decision.granted and not decision.mine
      line_write(lock.line, decision, now)
      position = math.max(position, line_position(lock.line))
    end
  end
  return {ABSENT, waiting and ms_arg(locks[1].line.ticket) or '', position}
end

-- 3. Every key admits: every fence counter checked before any is incremented, then every lock
-- taken and the place left on every line.
for _, lock in ipairs(locks) do
  if not lock.again then
    local refusal = fence_refusal(lock.fence_key, largest)
    if refusal then return refusal end
  end
end
local reply = {OK}
for _, lock in ipairs(locks) do
  local fence, expires_at
  if not lock.again then fence = issue_fence(lock.fence_key) end
  fence, expires_at = lock_grant(lock, now, ttl, fence)
  reply[#reply + 1] = fence
  reply[#reply + 1] = expires_at
end
return reply
