-- ensure.lua: set up an event's queue state, or restore it after Redis lost
-- it, without overwriting anything that is still there.
--
-- A gateway (ARGV[6] = 1) that finds the state missing, or the position
-- counter below what it knows was handed out, starts a restore: for the
-- restore window next.lua hands out no position, and every gateway that
-- calls this meanwhile raises the watermark and the counter to what it
-- remembers, so the queue carries on after the highest position any of
-- them knew of. A new event looks the same as a lost one, so it waits too.
--
-- KEYS[1] -> the event's state hash
-- KEYS[2] -> the event's position counter
-- ARGV[1] -> watermark to use when none is stored (during a restore: at
--            least, unless ARGV[11])
-- ARGV[2] -> hard cap (configuration: written unless the hard cap was
--            changed live, which sets the field hard_cap_live)
-- ARGV[3] -> sold_out (0/1) to use when none is stored (during a restore: 1 wins)
-- ARGV[4] -> paused (0/1) to use when none is stored (during a restore: 1 wins)
-- ARGV[5] -> last position the caller knows of: the counter is raised to it
-- ARGV[6] -> 1 when the caller hands out positions and may remember state
--            Redis lost (a gateway), 0 otherwise
-- ARGV[7] -> now, unix milliseconds (the caller's clock)
-- ARGV[8] -> the restore window, milliseconds
-- ARGV[9] -> hard cap per seat remaining (configuration, as ARGV[2])
-- ARGV[10] -> sold_out_by: the actor of the caller's sold_out = 1 (written
--            with it; during a restore an operator's, anything but
--            'origin', wins over the origin's)
-- ARGV[11] -> 1 when ARGV[1] is only the configured watermark: the caller
--            remembers none. Such a watermark is used when nobody
--            remembers one; the first caller that does replaces it during
--            the restore (the field watermark_configured marks it, with
--            the restore's end), and the others raise it to theirs.
-- returns 1 when the state had to be created, 0 when it was there
local created = redis.call('HSETNX', KEYS[1], 'watermark', ARGV[1])
local last = tonumber(redis.call('GET', KEYS[2]) or '0')
local known = tonumber(ARGV[5])
if ARGV[6] == '1' then
  local now = tonumber(ARGV[7])
  local restore_until = tonumber(redis.call('HGET', KEYS[1], 'restore_until') or '0')
  if (created == 1 or last < known) and restore_until <= now then
    restore_until = now + tonumber(ARGV[8])
    redis.call('HSET', KEYS[1], 'restore_until', restore_until)
  end
  if created == 1 and ARGV[11] == '1' and now < restore_until then
    redis.call('HSET', KEYS[1], 'watermark_configured', restore_until)
  end
  if created == 0 and now < restore_until then
    if ARGV[11] == '1' then
      -- Nothing remembered: the configured watermark adds nothing.
    elseif tonumber(redis.call('HGET', KEYS[1], 'watermark_configured') or '0') == restore_until then
      redis.call('HSET', KEYS[1], 'watermark', ARGV[1])
      redis.call('HDEL', KEYS[1], 'watermark_configured')
    elseif tonumber(redis.call('HGET', KEYS[1], 'watermark')) < tonumber(ARGV[1]) then
      redis.call('HSET', KEYS[1], 'watermark', ARGV[1])
    end
    if ARGV[3] == '1' then
      if redis.call('HGET', KEYS[1], 'sold_out') ~= '1' then
        redis.call('HSET', KEYS[1], 'sold_out', 1, 'sold_out_by', ARGV[10])
      elseif redis.call('HGET', KEYS[1], 'sold_out_by') == 'origin' then
        redis.call('HSET', KEYS[1], 'sold_out_by', ARGV[10])
      end
    end
    if ARGV[4] == '1' then
      redis.call('HSET', KEYS[1], 'paused', 1)
    end
  end
end
if redis.call('HEXISTS', KEYS[1], 'hard_cap_live') == 0 then
  redis.call('HSET', KEYS[1], 'hard_cap', ARGV[2], 'hard_cap_k', ARGV[9])
end
if redis.call('HSETNX', KEYS[1], 'sold_out', ARGV[3]) == 1 and ARGV[3] == '1' then
  redis.call('HSET', KEYS[1], 'sold_out_by', ARGV[10])
end
redis.call('HSETNX', KEYS[1], 'paused', ARGV[4])
if last < known then
  redis.call('SET', KEYS[2], ARGV[5])
end
return created
