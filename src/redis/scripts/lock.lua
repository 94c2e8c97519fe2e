-- One key's lock as an acquire script decides and takes it (after the prelude and line.lua):
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
  -- expiries alone (read only; an expired one is reclaimed by the next reader's grant).
  local refusal = check_type(lock.readers, 'zset')
  if refusal then return nil, refusal end
  local free = 1
  if live or redis.call('ZCOUNT', lock.readers, '(' .. ms_arg(now - tolerance), '+inf') > 0 then
    free = 0
  end
  local decision
  decision, refusal = line_decide(lock.line, free, now, tolerance)
  if not decision then return nil, refusal end
  lock.decision = decision
  return true
end

-- Takes the lock decided granted (its fence counter checked by fence_refusal): the next
-- fence, the line written, the record and (TypeScript layout) the index entry, for `ttl` ms.
-- Its fence and expiresAtMs.
local function lock_grant(lock, now, ttl)
  if lock.again then
    -- The record is written again, unchanged, so that a WAIT after this reply (min_replicas)
    -- counts replicas that have everything the first attempt wrote.
    redis.call('SET', lock.lock_key, lock.raw, 'KEEPTTL')
    return lock.again.fence, lock.again.expiresAtMs
  end
  local fence = issue_fence(lock.fence_key)
  line_write(lock.line, lock.decision, now)
  local expires_at = now + ttl
  local record = new_record(lock.lock_id, now, expires_at, lock.key, fence, lock.holder)
  redis.call('SET', lock.lock_key, record, 'PX', ttl)
  if lock.index_key then redis.call('SET', lock.index_key, lock.lock_key, 'PX', ttl) end
  return fence, expires_at
end
