-- release: give a hold's seats back, once, and only if the hold is live here.
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> users      hash    user id -> hold id
-- KEYS[3] -> holds      hash    hold id -> record (JSON: u user, q quantity,
--                               c confirmed, o served from the overflow reserve)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- KEYS[6] -> seats      hash    seat id -> hold id (a released hold's seats
--                               are freed with its count)
-- KEYS[7] -> sections   hash    general-admission section -> places left
--                               (a released hold of section g gives them back)
-- ARGV[1] -> hold id
-- ARGV[2] -> "pending": a confirmed hold is left alone (an abandoned hold);
--            "any": a confirmed hold is released too (the ledger says the
--            hold is over: a cancelled sale, an expiry the ledger decided);
--            "keep_buyer": released whatever its flag, and the buyer keeps a
--            record of no seats under the hold's id, so the one-hold-per-user
--            guard still answers with it (a sale served from the overflow
--            reserve after the hold expired);
--            "drop_buyer": as "any", and a buyer's record of no seats goes too
--            (the sale served from the overflow reserve ended)
-- ARGV[3] -> with "keep_buyer": the buyer's user id (the record may be gone)
-- ARGV[4] -> with "keep_buyer": now, unix ms, from the caller's clock: a
--            pending hold of the buyer's past its expiry holds no seat
-- returns {outcome, remaining, seats returned}
--   outcome: "released", "not_live" (unknown, already released or reclaimed,
--            or a buyer's record of no seats but with "drop_buyer"),
--            "confirmed" (left alone), "not_loaded" or "frozen"
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen', 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  -- Nothing to give back to: the next rebuild counts from the ledger.
  return {'not_loaded', 0, 0}
end
local rec = redis.call('HGET', KEYS[3], ARGV[1])

-- Frees the reserved seats, or the general-admission section's places, of
-- hold id whose record is r.
local function free_seats(id, r)
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
end

if ARGV[2] == 'keep_buyer' then
  local r = {u = ARGV[3]}
  local seats = 0
  if rec then
    r = cjson.decode(rec)
    if not r.o then
      seats = r.q
      free_seats(ARGV[1], r)
    end
  end
  redis.call('ZREM', KEYS[4], ARGV[1])
  local current = redis.call('HGET', KEYS[2], r.u)
  local holding = false
  if current and current ~= ARGV[1] and redis.call('HEXISTS', KEYS[3], current) == 1 then
    local exp = redis.call('ZSCORE', KEYS[4], current)
    holding = not exp or tonumber(exp) >= tonumber(ARGV[4])
  end
  if holding then
    -- The buyer holds other seats already: that hold is the guard's now.
    -- One that lapsed is not: it goes when reclaimed, and the guard would
    -- go with it.
    redis.call('HDEL', KEYS[3], ARGV[1])
  else
    r.q, r.c, r.o, r.s, r.g = 0, true, true, nil, nil
    redis.call('HSET', KEYS[3], ARGV[1], cjson.encode(r))
    redis.call('HSET', KEYS[2], r.u, ARGV[1])
  end
  if seats == 0 then
    return {'not_live', tonumber(redis.call('GET', KEYS[1])), 0}
  end
  return {'released', redis.call('INCRBY', KEYS[1], seats), seats}
end

if not rec then
  return {'not_live', tonumber(redis.call('GET', KEYS[1])), 0}
end
local r = cjson.decode(rec)
if r.o then
  if ARGV[2] ~= 'drop_buyer' then
    -- Takes no seat; only the end of the buyer's sale removes it.
    return {'not_live', tonumber(redis.call('GET', KEYS[1])), 0}
  end
  redis.call('HDEL', KEYS[3], ARGV[1])
  if redis.call('HGET', KEYS[2], r.u) == ARGV[1] then
    redis.call('HDEL', KEYS[2], r.u)
  end
  return {'released', tonumber(redis.call('GET', KEYS[1])), 0}
end
if r.c and ARGV[2] == 'pending' then
  return {'confirmed', tonumber(redis.call('GET', KEYS[1])), 0}
end
redis.call('HDEL', KEYS[3], ARGV[1])
redis.call('ZREM', KEYS[4], ARGV[1])
if redis.call('HGET', KEYS[2], r.u) == ARGV[1] then
  redis.call('HDEL', KEYS[2], r.u)
end
free_seats(ARGV[1], r)
local remaining = redis.call('INCRBY', KEYS[1], r.q)
return {'released', remaining, r.q}
