-- next.lua: take the next position(s) of an event, unless Redis lost the
-- event's state or a restore of it is still collecting what the gateways
-- remember: a counter that restarted must never hand out a position again.
--
-- KEYS[1] -> the event's state hash
-- KEYS[2] -> the event's position counter
-- ARGV[1] -> how many positions to take (1, or a leased block)
-- ARGV[2] -> now, unix milliseconds (the caller's clock)
-- ARGV[3] -> the highest counter value the caller has had from this script
-- returns the counter after the increment (the last position taken);
--         -1 when the state is missing or the counter is below ARGV[3]
--         (lost), -2 while the state is being restored
if redis.call('HEXISTS', KEYS[1], 'watermark') == 0 then
  return -1
end
local restore_until = tonumber(redis.call('HGET', KEYS[1], 'restore_until') or '0')
if tonumber(ARGV[2]) < restore_until then
  return -2
end
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
if last < tonumber(ARGV[3]) then
  return -1
end
return redis.call('INCRBY', KEYS[2], ARGV[1])
