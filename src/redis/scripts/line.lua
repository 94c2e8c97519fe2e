-- The line of waiters (after the prelude and typed.lua), shared by the acquire scripts and the
-- line's own. A line is three keys in the lock's hash slot: the order (a sorted set: place id ->
-- ticket), the expiries (a sorted set: place id -> expiresAtMs of Redis TIME) and the places (a
-- hash: place id -> holder text, '' for none, the field `shared:<place id>` = '1' for a place that
-- waits for a shared hold, and the field `ticket`: the last ticket issued). Every write gives all
-- three a PEXPIRE a little longer than a place lives, so a line nobody renews disappears on its
-- own.
--
-- THE RULE (src/line.rs): with `free` slots free, an acquisition is granted when more slots
-- are free than live places are ahead of it: none for 'ignore', every live place for 'keep'
-- and for a waiter not (or no longer) in line, those ordered before (its ticket, its place id)
-- for one in line (judged where it stands, whatever ticket it carries) or one that carries its
-- ticket (a waiter of several keys). Places are
-- ordered by ticket, then place id (byte order), as a sorted set orders equal scores. A
-- shared one (a reader) is granted when a slot is free and no live place ahead of it waits
-- for the exclusive lock (readers at the head of the line go together; a writer is not
-- passed). Every expired place is pruned. A waiter granted leaves its place; one not granted
-- takes a place with the ticket it carries (the line's last ticket grows to it), or at the
-- back with the next ticket, or renews the one it has.

local TICKET_FIELD = 'ticket'
local SHARED_FIELD = 'shared:'

-- An acquisition's line: its keys KEYS[k], KEYS[k + 1], KEYS[k + 2], and from ARGV[a] on
-- its mode ('ignore', 'keep' or 'wait'), its place id ('' unless waiting), how long a place
-- lives, how long the keys outlive the last write (ms) and the ticket it carries ('' for
-- none: a new place takes the line's next one); `holder` is its holder text and `shared`
-- whether it asks for a shared hold.
local function line_of(k, a, holder, shared)
  return {
    order = KEYS[k], expiry = KEYS[k + 1], places = KEYS[k + 2],
    mode = ARGV[a], place = ARGV[a + 1],
    place_ttl = tonumber(ARGV[a + 2]), keep = ARGV[a + 3], ticket = tonumber(ARGV[a + 4]),
    holder = holder or '', shared = shared or false
  }
end

-- Whether the place id `a` comes before `b` in byte order (as a sorted set orders members of
-- one score). Lua's own `<` on strings follows the server's locale.
local function bytes_before(a, b)
  for i = 1, math.min(#a, #b) do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then return x < y end
  end
  return #a < #b
end

-- Whether the place `place` with ticket `ticket` is ahead of `bound`, the (ticket, place id)
-- of the acquisition deciding (every place is, when `bound` is nil).
local function is_ahead(bound, ticket, place)
  if not bound then return true end
  if ticket ~= bound.ticket then return ticket < bound.ticket end
  return bytes_before(place, bound.place)
end

-- The places (expired ones included) ahead of `bound` (every place when it is nil).
local function places_ahead(line, bound)
  if not bound then return redis.call('ZRANGE', line.order, 0, -1) end
  local ahead = redis.call('ZRANGEBYSCORE', line.order, '-inf', '(' .. ms_arg(bound.ticket))
  local tied = redis.call('ZRANGEBYSCORE', line.order, ms_arg(bound.ticket), ms_arg(bound.ticket))
  for _, place in ipairs(tied) do
    if bytes_before(place, bound.place) then ahead[#ahead + 1] = place end
  end
  return ahead
end

-- The ticket a new place at the back of the line gets (its last ticket + 1), or nil and the
-- refusal of what is stored.
local function line_next_ticket(line)
  local refusal = check_type(line.places, 'hash')
  if refusal then return nil, refusal end
  return (tonumber(redis.call('HGET', line.places, TICKET_FIELD)) or 0) + 1
end

-- The ticket of the waiter's live place in `line`, or nil when it stands in no live place
-- there (the line's keys checked by line_refusal first).
local function line_standing(line, now, tolerance)
  local expires = redis.call('ZSCORE', line.expiry, line.place)
  if expires and tonumber(expires) > now - tolerance then
    return tonumber(redis.call('ZSCORE', line.order, line.place))
  end
  return nil
end

-- Whether a live place that waits for the exclusive lock is ahead of `bound` (see
-- is_ahead); `dead` holds the expired places (as a set). Stops at the first one found.
local function exclusive_ahead(line, bound, dead)
  for _, place in ipairs(places_ahead(line, bound)) do
    if not dead[place] and redis.call('HGET', line.places, SHARED_FIELD .. place) ~= '1' then
      return true
    end
  end
  return false
end

-- {FOREIGN, key, why} when a key of the line holds another Redis type.
local function line_refusal(line)
  return check_type(line.order, 'zset') or check_type(line.expiry, 'zset')
    or check_type(line.places, 'hash')
end

-- Decides an acquisition with `free` free slots at `now` by THE RULE, reading only. The
-- decision (`granted`, the expired places `dead`, the waiter's own live ticket `mine`) for
-- line_write, or nil and the refusal of what is stored. With no one in line this is one read
-- (TYPE), unless a waiter that is not granted is to take a place. The places ahead are those
-- before (the ticket it carries, else its own live ticket; its place id), or every one.
local function line_decide(line, free, now, tolerance)
  local decision = {granted = free > 0, dead = {}}
  local found = redis.call('TYPE', line.order).ok
  if found == 'none' and (decision.granted or line.mode ~= 'wait') then return decision end
  local refusal = line_refusal(line)
  if refusal then return nil, refusal end
  decision.dead = redis.call('ZRANGEBYSCORE', line.expiry, '-inf', ms_arg(now - tolerance))
  if line.mode == 'ignore' then return decision end
  if line.mode == 'wait' then decision.mine = line_standing(line, now, tolerance) end
  -- A waiter that stands in line already is judged where it stands, whatever ticket it carries
  -- (a retry whose first answer was lost carries none, or an older one): its own place is
  -- never ahead of it.
  local bound_ticket = line.mode == 'wait' and (decision.mine or line.ticket)
  local bound = bound_ticket and {ticket = bound_ticket, place = line.place} or nil
  if line.shared then
    local dead = {}
    for _, place in ipairs(decision.dead) do dead[place] = true end
    decision.granted = free > 0 and not exclusive_ahead(line, bound, dead)
    return decision
  end
  local ahead
  if bound then
    ahead = #places_ahead(line, bound)
  else
    ahead = redis.call('ZCARD', line.order)
  end
  for _, place in ipairs(decision.dead) do
    local ticket = redis.call('ZSCORE', line.order, place)
    if ticket and is_ahead(bound, tonumber(ticket), place) then
      ahead = ahead - 1
    end
  end
  decision.granted = free > ahead
  return decision
end

local function line_remove(line, places)
  for first = 1, #places, 500 do
    local last = math.min(first + 499, #places)
    redis.call('ZREM', line.order, unpack(places, first, last))
    redis.call('ZREM', line.expiry, unpack(places, first, last))
    local fields = {}
    for i = first, last do
      fields[#fields + 1] = places[i]
      fields[#fields + 1] = SHARED_FIELD .. places[i]
    end
    redis.call('HDEL', line.places, unpack(fields))
  end
end

-- Writes what line_decide decided: prunes the expired places, and for a waiter leaves its
-- place (granted) or takes or renews it (not granted). Writes nothing when there is nothing
-- to change, so an acquisition that finds no one in line writes nothing more.
local function line_write(line, decision, now)
  line_remove(line, decision.dead)
  local wrote = #decision.dead > 0
  if line.mode == 'wait' then
    if decision.granted then
      if decision.mine then
        line_remove(line, {line.place})
        wrote = true
      end
    else
      if not decision.mine then
        local ticket = line.ticket
        if ticket then
          local last = tonumber(redis.call('HGET', line.places, TICKET_FIELD)) or 0
          if ticket > last then redis.call('HSET', line.places, TICKET_FIELD, ms_arg(ticket)) end
        else
          ticket = redis.call('HINCRBY', line.places, TICKET_FIELD, 1)
        end
        redis.call('ZADD', line.order, ms_arg(ticket), line.place)
      end
      redis.call('ZADD', line.expiry, ms_arg(now + line.place_ttl), line.place)
      redis.call('HSET', line.places, line.place, line.holder)
      if line.shared then redis.call('HSET', line.places, SHARED_FIELD .. line.place, '1') end
      wrote = true
    end
  end
  if wrote then
    for _, key in ipairs({line.order, line.expiry, line.places}) do
      redis.call('PEXPIRE', key, line.keep)
    end
  end
end

-- How many live places stand ahead of the waiter's own (0: it is first), once line_write has
-- pruned the expired ones (so every place left in the order is live, ranked by ticket, then
-- place id, as the line orders them); -1 when it stands in no place (it is not waiting).
local function line_position(line)
  if line.mode ~= 'wait' then return -1 end
  return redis.call('ZRANK', line.order, line.place) or -1
end
