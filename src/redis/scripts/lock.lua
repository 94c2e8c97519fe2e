-- One key's lock as an acquire script decides and takes it (after the prelude, typed.lua,
-- record.lua, take.lua and line.lua):
-- the acquisition of one key (acquire.lua) and of several at once (acquire_all.lua) are built
-- from these, so a key of a set is decided and written exactly as a key alone.
--
-- A key's KEYS, from KEYS[k] on: its lock key, its fence counter, its line (order, expiry,
-- places: line.lua), its shared holders (a sorted set: lock id -> expiresAtMs, semaphore.lua);
-- `index_key` is its index key in the TypeScript layout (nil in the cluster layout, which
-- writes its index entry, in another hash slot, outside the script). `a` is where the line's
-- ARGV start (line_of).
local function lock_of(k, a, lock_id, key, holder, index_key)
  return {
    lock_key = KEYS[k], fence_key = KEYS[k + 1], readers = KEYS[k + 5], index_key = index_key,
    line = line_of(k + 2, a, holder), lock_id = lock_id, key = key, holder = holder
  }
end

-- Reads the lock and decides it by THE RULE, writing nothing: true, or nil and the reply that
-- refuses what is stored. Then either `lock.again` (this very lock id holds it: the
-- acquisition is repeated after its reply was lost, and gets the same lease again) or
-- `lock.decision` (line_decide's: granted when free and the line lets it pass).
local function lock_decide(lock, now, tolerance)
  local held, raw = read_lock(lock.lock_key)
  if held == nil then return nil, raw end
  local live = held and held.expiresAtMs > now - tolerance
  if live and held.lockId == lock.lock_id then
    lock.again, lock.raw = held, raw
    return true
  end
  -- Live shared holders keep the lock from a writer as a live record does: counted by their
  -- expiries alone (read only; an expired one is reclaimed by the next reader's grant). The
  -- count is the type check: only a key of another type fails it, and then says which type.
  local readers = redis.pcall('ZCOUNT', lock.readers, '(' .. ms_arg(now - tolerance), '+inf')
  if type(readers) ~= 'number' then
    return nil, check_type(lock.readers, 'zset') or {FOREIGN, lock.readers, tostring(readers.err)}
  end
  local free = (live or readers > 0) and 0 or 1
  local decision, refusal = line_decide(lock.line, free, now, tolerance)
  if not decision then return nil, refusal end
  lock.decision = decision
  return true
end

-- Takes the lock decided granted with `fence` (the new lock's, none for `lock.again`): the
-- line written, then take_lock's. Its fence and expiresAtMs.
local function lock_grant(lock, now, ttl, fence)
  if lock.again then
    -- The record is written again, unchanged, so that a WAIT after this reply (min_replicas)
    -- counts replicas that have everything the first attempt wrote.
    redis.call('SET', lock.lock_key, lock.raw, 'KEEPTTL')
    return lock.again.fence, lock.again.expiresAtMs
  end
  line_write(lock.line, lock.decision, now)
  return take_lock(lock.lock_key, lock.index_key, lock.lock_id, lock.key, lock.holder, fence,
    now, ttl)
end
