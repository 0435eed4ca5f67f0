-- presence.lua: which positions were polled lately.
--
-- Every poll of a waiting position sets its bit in the bitmap of the time
-- slot it falls in (SETBIT, batched by each gateway); a position is present
-- while its bit is set in one of the recent slots. This ORs them and
-- returns the bytes covering a range of positions.
--
-- KEYS[1]    -> scratch key for the OR, deleted before returning
-- KEYS[2..n] -> the recent slots' bitmaps (missing ones count as empty)
-- ARGV[1]    -> first byte (position / 8)
-- ARGV[2]    -> last byte
-- returns the bytes of the OR in that range (shorter, or empty, where no
--         bitmap reaches)
local srcs = {}
for i = 2, #KEYS do
  srcs[#srcs + 1] = KEYS[i]
end
redis.call('BITOP', 'OR', KEYS[1], unpack(srcs))
local out = redis.call('GETRANGE', KEYS[1], ARGV[1], ARGV[2])
redis.call('DEL', KEYS[1])
return out
