-- held.lua: queue positions whose holders went on to hold seats, and, when
-- asked, each holder's admission kept past its window: the origin's two
-- notes of new holds, for as many holds as met, in one round trip.
--
-- The first hold made with a position sets its bit and, unless the
-- position was refused a hold before (its holder waited for a seat to come
-- back), is listed among the recent ones with when it was made; later
-- holds of the same position (a retry, a new hold after one expired)
-- change nothing. Every hold also sets the position's bit among those
-- that came to hold, as a refusal does.
--
-- KEYS[1]   -> the event's bitmap of positions that held
-- KEYS[2]   -> the event's list of recent first holds, "position:unix ms",
--              newest first
-- KEYS[3]   -> the event's bitmap of positions refused a hold
-- KEYS[4]   -> the event's bitmap of positions that came to hold: held or
--              were refused
-- KEYS[5..] -> the admission extensions, one for each hold that asks for
--              one, in order
-- ARGV[1]   -> how many recent holds the list keeps
-- then four ARGV for each hold:
--   the position (below 1: none, nothing marked)
--   when the hold was made, unix ms
--   until when the admission is kept, unix ms
--   for how long from now, ms (0: no extension, and no key of its own)
-- returns how many of the holds were their position's first
local keep = tonumber(ARGV[1])
local key = 4
local first = 0
for i = 2, #ARGV, 4 do
  local position, at = tonumber(ARGV[i]), ARGV[i + 1]
  if tonumber(ARGV[i + 3]) > 0 then
    key = key + 1
    redis.call('SET', KEYS[key], ARGV[i + 2], 'PX', ARGV[i + 3])
  end
  if position >= 1 then
    redis.call('SETBIT', KEYS[4], position, 1)
    if redis.call('SETBIT', KEYS[1], position, 1) == 0 then
      first = first + 1
      if redis.call('GETBIT', KEYS[3], position) == 0 then
        redis.call('LPUSH', KEYS[2], position .. ':' .. at)
      end
    end
  end
end
redis.call('LTRIM', KEYS[2], 0, keep - 1)
return first
