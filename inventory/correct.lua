-- correct: bring the keys in line with the ledger while holds keep running:
-- add the live holds the ledger has and Redis lost, drop the holds the
-- ledger has ended, then set remaining to the sellable seats minus the
-- seats of every hold record left, the reserved seats' owners from the
-- records' seat lists, and each general-admission section's places left to
-- its capacity minus the places of the records naming it. Every other script moves remaining and
-- the records together, so this count is exact whatever is in flight: a
-- hold whose ledger row is still being written has its record here, and
-- its seats stay taken until its own request settles it.
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> users      hash    user id -> hold id
-- KEYS[3] -> holds      hash    hold id -> record (JSON: u user, q quantity,
--                               c confirmed, o served from the overflow reserve)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- KEYS[6] -> seats      hash    seat id -> hold id (rewritten from the records)
-- KEYS[7] -> sections   hash    general-admission section -> places left
--                               (rewritten from the records)
-- ARGV[1] -> sellable seats of the event
-- ARGV[2] -> the general-admission sections' capacities (JSON object
--            section -> places; {} for none)
-- ARGV[3] -> not before, unix ms (0: none): a pending hold to add that
--            expires before it is not added. Another node, its clock
--            ahead of the caller's, may have reclaimed it already and its
--            seats gone to another hold; the caller passes its clock plus
--            how far apart the nodes' clocks may be.
-- ARGV[4] -> "1": count every record again whatever this call changed;
--            "0": only if it added, dropped or confirmed a record (see
--            Recount in correct.go)
-- ARGV[5] -> n, the number of holds to add
-- ARGV[6 .. 5+4n] -> four values per hold to add: hold id, user id, record
--              (JSON), expires_at ms (-1: not in the expiry index); one that
--              Redis has by now is left as it is, but for its confirmation:
--              a confirmed record (c) confirms Redis's pending one (a
--              confirmation Redis lost, which it would otherwise give
--              away at the hold's expiry)
-- ARGV[6+4n ..] -> ids of holds to drop (a buyer's record of no seats stays)
-- returns {outcome, remaining before, remaining after, added, dropped,
--          seats whose owner was wrong (missing, stray or another hold's),
--          places by which the sections' counts were wrong, holds not added
--          for expiring before ARGV[3], pending records confirmed}
--   outcome: "ok", "not_loaded" or "frozen" (nothing changed)
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen', 0, 0, 0, 0, 0, 0, 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded', 0, 0, 0, 0, 0, 0, 0, 0}
end
local notBefore = tonumber(ARGV[3])
local n = tonumber(ARGV[5])
local added, dropped, lapsed, confirmed = 0, 0, 0, 0
for i = 6, 5 + 4 * n, 4 do
  local id, user, rec, exp = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  if exp >= 0 and exp < notBefore then
    lapsed = lapsed + 1
  elseif redis.call('HEXISTS', KEYS[3], id) == 0 then
    redis.call('HSET', KEYS[3], id, rec)
    if exp >= 0 then
      redis.call('ZADD', KEYS[4], exp, id)
    end
    local current = redis.call('HGET', KEYS[2], user)
    if not current or redis.call('HEXISTS', KEYS[3], current) == 0 then
      redis.call('HSET', KEYS[2], user, id)
    end
    added = added + 1
  elseif exp < 0 then
    local want = cjson.decode(rec)
    local r = cjson.decode(redis.call('HGET', KEYS[3], id))
    if want.c and not r.c and not r.o then
      r.c = true
      redis.call('HSET', KEYS[3], id, cjson.encode(r))
      redis.call('ZREM', KEYS[4], id)
      confirmed = confirmed + 1
    end
  end
end
for i = 6 + 4 * n, #ARGV do
  local id = ARGV[i]
  local rec = redis.call('HGET', KEYS[3], id)
  if rec then
    local r = cjson.decode(rec)
    if not r.o then
      redis.call('HDEL', KEYS[3], id)
      redis.call('ZREM', KEYS[4], id)
      if redis.call('HGET', KEYS[2], r.u) == id then
        redis.call('HDEL', KEYS[2], r.u)
      end
      dropped = dropped + 1
    end
  end
end
if ARGV[4] ~= '1' and added + dropped + confirmed == 0 then
  local left = tonumber(redis.call('GET', KEYS[1]))
  return {'ok', left, left, 0, 0, 0, 0, lapsed, 0}
end
local taken = 0
local owners = {}
local places = cjson.decode(ARGV[2])
local all = redis.call('HGETALL', KEYS[3])
for i = 1, #all, 2 do
  local r = cjson.decode(all[i + 1])
  taken = taken + r.q
  if r.s then
    for _, s in ipairs(r.s) do
      owners[s] = all[i]
    end
  end
  if r.g and places[r.g] then
    places[r.g] = places[r.g] - r.q
  end
end
local placesFixed = 0
for section, left in pairs(places) do
  if left < 0 then
    left = 0
  end
  local was = tonumber(redis.call('HGET', KEYS[7], section) or '0')
  if was ~= left then
    placesFixed = placesFixed + math.abs(left - was)
  end
  redis.call('HSET', KEYS[7], section, left)
end
local fixed = 0
local current = redis.call('HGETALL', KEYS[6])
for i = 1, #current, 2 do
  local s, id = current[i], current[i + 1]
  if owners[s] ~= id then
    fixed = fixed + 1
    if owners[s] then
      redis.call('HSET', KEYS[6], s, owners[s])
    else
      redis.call('HDEL', KEYS[6], s)
    end
  end
  owners[s] = nil
end
for s, id in pairs(owners) do
  fixed = fixed + 1
  redis.call('HSET', KEYS[6], s, id)
end
local before = tonumber(redis.call('GET', KEYS[1]))
local after = tonumber(ARGV[1]) - taken
if after < 0 then
  after = 0
end
redis.call('SET', KEYS[1], after)
return {'ok', before, after, added, dropped, fixed, placesFixed, lapsed, confirmed}
