-- reclaim: return the seats of holds whose expiry has passed, so that
-- "remaining" counts them as free before the reaper marks their rows (the
-- hold script does the same before it takes seats).
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> users      hash    user id -> hold id
-- KEYS[3] -> holds      hash    hold id -> record (JSON: u user, q quantity)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- KEYS[6] -> seats      hash    seat id -> hold id (freed with the hold)
-- KEYS[7] -> sections   hash    general-admission section -> places left
--                               (a record's g section gets its places back)
-- ARGV[1] -> now, unix ms, from the caller's clock
-- ARGV[2] -> most holds to reclaim in this call
-- returns {outcome, remaining, seats reclaimed, holds reclaimed}
--   outcome: "ok", "not_loaded" or "frozen"
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen', 0, 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded', 0, 0, 0}
end
local seats, holds = 0, 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[1], 'LIMIT', 0, tonumber(ARGV[2]))
for _, id in ipairs(expired) do
  redis.call('ZREM', KEYS[4], id)
  local rec = redis.call('HGET', KEYS[3], id)
  if rec then
    local r = cjson.decode(rec)
    redis.call('HDEL', KEYS[3], id)
    if redis.call('HGET', KEYS[2], r.u) == id then
      redis.call('HDEL', KEYS[2], r.u)
    end
    if r.s then
      for _, s in ipairs(r.s) do
        if redis.call('HGET', KEYS[6], s) == id then
          redis.call('HDEL', KEYS[6], s)
        end
      end
    end
    if r.g then
      redis.call('HINCRBY', KEYS[7], r.g, r.q)
    end
    redis.call('INCRBY', KEYS[1], r.q)
    seats = seats + r.q
  end
  holds = holds + 1
end
return {'ok', tonumber(redis.call('GET', KEYS[1])), seats, holds}
