-- Shared by the break scripts (after the prelude): which leases an operator's break removes,
-- and how long the marker that takes a broken holder's place lasts. The rules are
-- src/driver/breaking.rs's, computed here with Redis TIME.

-- Whether lock_id is a break's marker: 22 characters ending in '-', which no drawn lock id
-- has (its last character carries 2 bits: one of A Q g w). A marker is never broken again.
local function is_marker(lock_id)
  return #lock_id == 22 and lock_id:sub(-1) == '-'
end

-- Whether a break of `only` ('' for every holder) removes the lease held under lock_id.
local function breaks(lock_id, only)
  return not is_marker(lock_id) and (only == '' or lock_id == only)
end

-- The expiry of the marker that takes the place of a holder expiring at holder_expires_at,
-- broken at `now`; nil for no marker. `delay`: 'rest' (the broken lease's own expiry, at
-- least now + 1), 'none', or a number of milliseconds from now.
local function marker_expiry(delay, holder_expires_at, now)
  if delay == 'none' then return nil end
  if delay == 'rest' then return math.max(holder_expires_at, now + 1) end
  return now + tonumber(delay)
end
