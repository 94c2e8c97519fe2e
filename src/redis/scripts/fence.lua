-- A fence counter (after the prelude): checked before anything is written, then incremented.

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

-- The next fence of the counter at fence_key, or nil and the reply that refuses it
-- (fence_refusal's). One write where fence_refusal's read and issue_fence's write are two
-- calls: the counter is incremented at once, and put back when the fence it gives is refused,
-- which leaves it as it was (nothing sees the step between: a script is atomic). A counter
-- that INCR leaves alone (another type, not an integer, at the 64-bit limit) is read by
-- fence_refusal to say why.
local function take_fence(fence_key, largest)
  local next = redis.pcall('INCR', fence_key)
  if type(next) == 'number' then
    -- The counter held next - 1: a fence when that is a non-negative integer of at most 15
    -- digits below `largest`.
    if next >= 1 and next <= tonumber(largest) and next <= 1e15 then
      return string.format('%015d', next)
    end
    redis.call('DECR', fence_key)
  end
  local refusal = fence_refusal(fence_key, largest)
  if refusal then return nil, refusal end
  -- A counter fine, yet not incremented (the server refused the write, out of memory say):
  -- the same error again, for the caller.
  return issue_fence(fence_key)
end
