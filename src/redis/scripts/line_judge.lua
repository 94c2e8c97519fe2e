-- One key of a set whose keys lie in several Cluster hash slots (no script may touch two):
-- decides the key's admission by THE RULE and stands in its line without taking the lock, so
-- that a set refused on any key keeps (or takes) its one ticket's place on every key of the
-- set that refuses it and on every key where it stands already (admit_all in src/line.rs).
-- KEYS: lock key, fence counter key, the lock's line (order, expiry, places: line.lua), the
-- lock's shared holders
-- ARGV: tolerance ms, step, holder description (empty: none), then the line (mode 'wait',
-- place id, place ttl ms, line keys' ttl ms, ticket ('' for none)). The step is 'judge' (stand
-- or renew where refused or standing already), or 'stand' (stand or renew whatever the key
-- says). Without a ticket nothing is written: the reply tells what the set's ticket comes from.
-- Reply: {OK, admitted (1 or 0), the ticket of its live place before this call ('' for none),
-- the ticket a new place at the back of the line would get, the places ahead of its own after
-- this call (line_position; -1 when it stands in no place)} | {FOREIGN, key, why}
local tolerance, step = tonumber(ARGV[1]), ARGV[2]
local now = now_ms()

-- No lock id: this call never takes the lock, so it never finds the lock its own.
local lock = lock_of(1, 4, '', '', ARGV[3], nil)
local decided, refusal = lock_decide(lock, now, tolerance)
if not decided then return refusal end
local decision = lock.decision
local next_ticket
next_ticket, refusal = line_next_ticket(lock.line)
if not next_ticket then return refusal end
local reply = {OK, decision.granted and 1 or 0, decision.mine and ms_arg(decision.mine) or '',
  next_ticket}
if lock.line.ticket then
  decision.granted = decision.granted and not decision.mine and step ~= 'stand'
  line_write(lock.line, decision, now)
end
reply[#reply + 1] = line_position(lock.line)
return reply
