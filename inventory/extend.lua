-- extend: push a live pending hold's expiry later (never earlier), e.g. to
-- cover payment processing.
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> users      hash    user id -> hold id
-- KEYS[3] -> holds      hash    hold id -> record (JSON)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- KEYS[6] -> seats      hash    seat id -> hold id (not touched here)
-- ARGV[1] -> hold id
-- ARGV[2] -> now, unix ms, from the caller's clock
-- ARGV[3] -> new expires_at, unix ms
-- returns {outcome, expires_at ms after the call}
--   outcome: "extended", "confirmed" (no expiry any more), "expired",
--            "not_live", "not_loaded" or "frozen"
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen', 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded', 0}
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  return {'not_live', 0}
end
if cjson.decode(rec).c then
  return {'confirmed', -1}
end
local exp = redis.call('ZSCORE', KEYS[4], ARGV[1])
if not exp or tonumber(exp) < tonumber(ARGV[2]) then
  return {'expired', tonumber(exp or 0)}
end
redis.call('ZADD', KEYS[4], 'XX', 'GT', ARGV[3], ARGV[1])
return {'extended', tonumber(redis.call('ZSCORE', KEYS[4], ARGV[1]))}
