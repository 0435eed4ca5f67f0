-- close.lua: close a pre-queue's entries and reserve the entrants'
-- positions, once: the first call takes as many positions from the counter
-- as there are entrants; every later call returns what the first fixed.
--
-- KEYS[1] -> the event's lottery hash
-- KEYS[2] -> the event's entrant set
-- KEYS[3] -> the event's state hash
-- KEYS[4] -> the event's position counter
-- ARGV[1] -> now, unix milliseconds (the caller's clock)
-- ARGV[2] -> when the lottery's records expire, unix milliseconds
-- returns {base, count}: positions base+1 … base+count are the entrants';
--         -1 when the state is missing (lost), -2 while it is being restored
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  return {tonumber(redis.call('HGET', KEYS[1], 'base')), tonumber(redis.call('HGET', KEYS[1], 'count'))}
end
if redis.call('HEXISTS', KEYS[3], 'watermark') == 0 then
  return -1
end
local restore_until = tonumber(redis.call('HGET', KEYS[3], 'restore_until') or '0')
if tonumber(ARGV[1]) < restore_until then
  return -2
end
local count = redis.call('SCARD', KEYS[2])
local last = redis.call('INCRBY', KEYS[4], count)
redis.call('HSET', KEYS[1], 'closed', 1, 'base', last - count, 'count', count)
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
if count > 0 then
  redis.call('PEXPIREAT', KEYS[2], ARGV[2])
end
return {last - count, count}
