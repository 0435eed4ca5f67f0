-- confirm: turn a live pending hold into a sale. It leaves the expiry index
-- for good, so neither the reaper nor an expired-hold reclaim can return it.
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> users      hash    user id -> hold id (kept: a confirmed hold is live)
-- KEYS[3] -> holds      hash    hold id -> record (JSON; c set to true here)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- KEYS[6] -> seats      hash    seat id -> hold id (not touched here)
-- ARGV[1] -> hold id
-- ARGV[2] -> now, unix ms, from the caller's clock
-- returns {outcome}
--   outcome: "confirmed" (now or before), "expired" (past expires_at: its seat
--            may already be someone else's), "not_live", "not_loaded" or "frozen"
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen'}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded'}
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  return {'not_live'}
end
local r = cjson.decode(rec)
if r.c then
  return {'confirmed'}
end
local exp = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not exp or tonumber(exp) < tonumber(ARGV[2]) then
  return {'expired'}
end
r.c = true
redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(r))
redis.call('ZREM', KEYS[4], ARGV[1])
return {'confirmed'}
