-- release: give a hold's seats back, once, and only if the hold is live here.
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> users      hash    user id -> hold id
-- KEYS[3] -> holds      hash    hold id -> record (JSON: u user, q quantity, c confirmed)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- ARGV[1] -> hold id
-- ARGV[2] -> "pending": a confirmed hold is left alone (the reaper, an
--            abandoned hold); "any": a confirmed hold is released too (a
--            cancelled sale)
-- returns {outcome, remaining, seats returned}
--   outcome: "released", "not_live" (unknown, already released or reclaimed),
--            "confirmed" (left alone), "not_loaded" or "frozen"
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen', 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- Nothing to give back to: the next rebuild counts from the ledger.
  return {'not_loaded', 0, 0}
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])
if not rec then
  return {'not_live', tonumber(redis.call('GET', KEYS[1])), 0}
end
local r = cjson.decode(rec)
if r.c and ARGV[2] ~= 'any' then
  return {'confirmed', tonumber(redis.call('GET', KEYS[1])), 0}
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('HGET', KEYS[2], r.u) == ARGV[1] then
  redis.call('HDEL', KEYS[2], r.u)
end
local remaining = redis.call('INCRBY', KEYS[1], r.q)
return {'released', remaining, r.q}
