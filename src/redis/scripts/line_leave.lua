-- KEYS: a line's order, expiry and places (line.lua)
-- ARGV: the place id of a waiter that gives up
-- Reply: {OK} (whether or not the place was there) | {FOREIGN, key, why}
local line = {order = KEYS[1], expiry = KEYS[2], places = KEYS[3]}
local refusal = line_refusal(line)
if refusal then return refusal end
line_remove(line, {ARGV[1]})
return {OK}
