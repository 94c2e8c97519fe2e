-- A holder set's acquisition (a permit's or a shared hold's) after the line is known (after
-- semaphore.lua and line.lua): both acquire scripts decide and refuse alike.

-- Begins the acquisition of the lease `lock_id` in the holder set `holders_key` (expiries) and
-- `records_key` (records): the time, and the reply that ends it already, if any — what is
-- stored refuses, or this very lock id holds a live lease (the acquisition repeated after its
-- reply was lost gets the same lease again).
local function holder_begin(holders_key, records_key, lock_id, tolerance)
  local refusal = check_semaphore(holders_key, records_key)
  if refusal then return nil, refusal end
  local now = now_ms()
  local mine, why = read_permit(holders_key, records_key, lock_id)
  if mine == nil then return now, why end
  return now, repeated_grant(records_key, lock_id, mine, now, tolerance)
end

-- Decides the acquisition with `free` free slots at `now` by THE RULE; when it is granted,
-- issues the next fence of `fence_key` (at most `largest`, checked before the line or the
-- holder is written) and writes the line. The fence, or nil and the reply: {ABSENT, position}
-- when refused (line_position, after its place is written), or what is stored refuses.
local function holder_admit(line, free, now, tolerance, fence_key, largest)
  local decision, why = line_decide(line, free, now, tolerance)
  if not decision then return nil, why end
  if not decision.granted then
    line_write(line, decision, now)
    return nil, {ABSENT, line_position(line)}
  end
  local fence
  fence, why = take_fence(fence_key, largest)
  if not fence then return nil, why end
  line_write(line, decision, now)
  return fence
end
