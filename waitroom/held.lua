-- held.lua: a queue position whose holder went on to hold seats, and, when
-- asked, the holder's admission kept past its window: the origin's two
-- notes of a new hold in one round trip.
--
-- The first hold made with a position sets its bit and, unless the
-- position was refused a hold before (its holder waited for a seat to come
-- back), is listed among the recent ones with when it was made; later
-- holds of the same position (a retry, a new hold after one expired)
-- change nothing. Every hold also sets the position's bit among those
-- that came to hold, as a refusal does.
--
-- KEYS[1] -> the event's bitmap of positions that held
-- KEYS[2] -> the event's list of recent first holds, "position:unix ms",
--            newest first
-- KEYS[3] -> the event's bitmap of positions refused a hold
-- KEYS[4] -> the event's bitmap of positions that came to hold: held or
--            were refused
-- KEYS[5] -> (with ARGV[5] > 0) the holder's admission extension
-- ARGV[1] -> the position (below 1: none, nothing marked)
-- ARGV[2] -> when the hold was made, unix ms
-- ARGV[3] -> how many recent holds the list keeps
-- ARGV[4] -> until when the admission is kept, unix ms
-- ARGV[5] -> for how long from now, ms (0: no extension)
-- returns 1 for the position's first hold, else 0
if tonumber(ARGV[5]) > 0 then
  redis.call('SET', KEYS[5], ARGV[4], 'PX', ARGV[5])
end
if tonumber(ARGV[1]) < 1 then
  return 0
end
redis.call('SETBIT', KEYS[4], ARGV[1], 1)
if redis.call('SETBIT', KEYS[1], ARGV[1], 1) == 1 then
  return 0
end
if redis.call('GETBIT', KEYS[3], ARGV[1]) == 1 then
  return 1
end
redis.call('LPUSH', KEYS[2], ARGV[1] .. ':' .. ARGV[2])
redis.call('LTRIM', KEYS[2], 0, tonumber(ARGV[3]) - 1)
return 1
