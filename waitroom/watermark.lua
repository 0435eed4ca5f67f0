-- watermark.lua: set and/or raise an event's watermark, never on a state
-- the caller knows was lost: a write to the emptied hash would create the
-- watermark alone, and the state would pass for one that was never lost
-- (no restore, a position counter starting again at 1).
--
-- KEYS[1] -> the event's state hash
-- ARGV[1] -> the watermark to set, '' for none
-- ARGV[2] -> what to add to it then, '0' for nothing (HINCRBY: an
--            overflow is Redis's error, and nothing is added)
-- ARGV[3] -> 1 when the caller has read the state before, so a missing one
--            was lost; 0 for a caller that never has (one that sets a new
--            event up this way, as the origin's tests and the simulation
--            do, without a gateway)
-- returns 1 when written, 0 when the state was lost (nothing written)
if ARGV[3] == '1' and redis.call('HEXISTS', KEYS[1], 'watermark') == 0 then
  return 0
end
if ARGV[1] ~= '' then
  redis.call('HSET', KEYS[1], 'watermark', ARGV[1])
end
if ARGV[2] ~= '0' then
  redis.call('HINCRBY', KEYS[1], 'watermark', ARGV[2])
end
-- A watermark written is nobody's configured one (ensure.lua).
redis.call('HDEL', KEYS[1], 'watermark_configured')
return 1
