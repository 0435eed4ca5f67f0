-- ensure.lua: set up an event's queue state, or restore it after Redis lost
-- it, without overwriting anything that is still there.
--
-- KEYS[1] -> the event's state hash
-- KEYS[2] -> the event's position counter
-- ARGV[1] -> watermark to use when none is stored
-- ARGV[2] -> hard cap (configuration: always written)
-- ARGV[3] -> sold_out (0/1) to use when none is stored
-- ARGV[4] -> paused (0/1) to use when none is stored
-- ARGV[5] -> last position the caller knows of: the counter is raised to it
-- returns 1 when the state had to be created, 0 when it was there
local created = redis.call('HSETNX', KEYS[1], 'watermark', ARGV[1])
redis.call('HSET', KEYS[1], 'hard_cap', ARGV[2])
redis.call('HSETNX', KEYS[1], 'sold_out', ARGV[3])
redis.call('HSETNX', KEYS[1], 'paused', ARGV[4])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last < tonumber(ARGV[5]) then
  redis.call('SET', KEYS[2], ARGV[5])
end
return created
