-- hold: take `quantity` seats for a user, at most one live hold per user.
--
-- KEYS[1] -> remaining  string  seats left to sell; missing means "not loaded"
-- KEYS[2] -> users      hash    user id -> hold id of the user's live hold
-- KEYS[3] -> holds      hash    hold id -> record (JSON: u user, q quantity,
--                               k/b idempotency digests, c true once confirmed,
--                               s the seat ids of a reserved-seating hold,
--                               g the general-admission section of a seat map)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms); pending holds only
-- KEYS[5] -> frozen     string  present while a rebuild loads the keys
-- KEYS[6] -> seats      hash    seat id -> hold id of the hold that has it
-- KEYS[7] -> sections   hash    general-admission section -> places left
-- KEYS[8] -> claim      string  optional: the request's idempotency record,
--                               on the event's slot (see HoldRequest.Claim)
-- ARGV[1] -> user id
-- ARGV[2] -> hold id to use if a new hold is made
-- ARGV[3] -> quantity (>= 1)
-- ARGV[4] -> expires_at of the new hold, unix ms
-- ARGV[5] -> now, unix ms, from the caller's clock (never Redis TIME, so
--            expiry follows the same clock as the ledger)
-- ARGV[6] -> record of the new hold (JSON, as above); with s, the seats
--            (sorted) are taken all together or not at all; with g, the
--            quantity comes out of that section's places too
-- ARGV[7] -> most expired holds to reclaim in this call
-- ARGV[8] -> with KEYS[8]: the value it is set to along with a held,
--            already_held or sold_out answer
-- ARGV[9] -> with KEYS[8]: that value's lifetime, ms
-- ARGV[10] -> with KEYS[8]: a value of it this call may replace (a claim
--            left by a request that never answered), or ''
-- ARGV[11] -> optional: the call's deadline, unix ms by Redis's own clock
--            (TIME): a call that runs later changes nothing, so once it has
--            passed a caller whose reply was lost knows the call is over
-- returns {outcome, hold id, record, expires_at ms (-1 once confirmed),
--          remaining after the call, seats reclaimed from expired holds}
--   outcome: "held", "already_held", "sold_out", "seats_taken" (the record
--   is then the JSON array of the asked-for seats another hold has; nothing
--   was taken), "not_loaded", "frozen",
--   "late" (past ARGV[11]; nothing was changed), or "claimed" (KEYS[8]
--   holds another value, returned as the record; nothing else was looked at
--   or changed); with g, sold_out's remaining is the section's places left
-- The request's claim first: another request's record (a replay, or a
-- request still running) is answered whatever state the inventory is in.
local claim = KEYS[8]
if claim then
  local claimed = redis.call('GET', claim)
  if claimed and claimed ~= ARGV[10] then
    return {'claimed', '', claimed, 0, 0, 0}
  end
end

-- After the claim: a run of this request's call that took seats left its
-- claim, so a retry of it says "claimed" even when late.
local deadline = tonumber(ARGV[11])
if deadline then
  local t = redis.call('TIME')
  if tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000) >= deadline then
    return {'late', '', '', 0, 0, 0}
  end
end

-- Every answer that reaches the inventory claims the request's key with it.
local function answer(reply)
  if claim then
    redis.call('SET', claim, ARGV[8], 'PX', ARGV[9])
  end
  return reply
end

if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'frozen', '', '', 0, 0, 0}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded', '', '', 0, 0, 0}
end
local quantity = tonumber(ARGV[3])
if not quantity or quantity < 1 then
  return redis.error_reply('ERR hold: quantity must be at least 1')
end
local now = tonumber(ARGV[5])
local reclaimed = 0

-- Returns an expired hold's seats. Its ledger row is still pending until the
-- reaper gets to it; the reaper's release then finds nothing and changes nothing.
local function reclaim(id)
  local rec = redis.call('HGET', KEYS[3], id)
  redis.call('ZREM', KEYS[4], id)
  if not rec then
    return
  end
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
  reclaimed = reclaimed + r.q
end

-- Holds past expires_at count as free before the reaper marks them.
local expired = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. ARGV[5], 'LIMIT', 0, tonumber(ARGV[7]))
for _, id in ipairs(expired) do
  reclaim(id)
end

-- One hold per user: a retry gets the hold it already has.
local existing = redis.call('HGET', KEYS[2], ARGV[1])
if existing then
  local rec = redis.call('HGET', KEYS[3], existing)
  local exp = redis.call('ZSCORE', KEYS[4], existing)
  if rec and exp and tonumber(exp) < now then
    reclaim(existing)
  elseif rec then
    local remaining = tonumber(redis.call('GET', KEYS[1]))
    return answer({'already_held', existing, rec, tonumber(exp or -1), remaining, reclaimed})
  else
    redis.call('HDEL', KEYS[2], ARGV[1])
  end
end

-- Reserved seats: every one free, or held by a hold past its expiry (lazy
-- expiry: reclaimed here), or nothing changes and the taken ones are named.
local seats = nil
if string.find(ARGV[6], '"s":', 1, true) then
  seats = cjson.decode(ARGV[6]).s
end
if seats then
  local taken = {}
  for _, s in ipairs(seats) do
    local owner = redis.call('HGET', KEYS[6], s)
    if owner then
      local exp = redis.call('ZSCORE', KEYS[4], owner)
      if exp and tonumber(exp) < now then
        reclaim(owner)
      elseif redis.call('HEXISTS', KEYS[3], owner) == 0 then
        redis.call('HDEL', KEYS[6], s)
      else
        taken[#taken + 1] = s
      end
    end
  end
  if #taken > 0 then
    return answer({'seats_taken', '', cjson.encode(taken), 0, tonumber(redis.call('GET', KEYS[1])), reclaimed})
  end
end

-- A general-admission section of a seat map: its own count of places, on
-- top of the event's (a count that is missing has none left).
local section = nil
if string.find(ARGV[6], '"g":', 1, true) then
  section = cjson.decode(ARGV[6]).g
end
if section then
  local left = tonumber(redis.call('HGET', KEYS[7], section) or '0')
  if left < quantity then
    return answer({'sold_out', '', '', 0, left, reclaimed})
  end
end

-- The check and the decrement in one script: remaining never goes below 0.
local remaining = tonumber(redis.call('GET', KEYS[1]))
if remaining < quantity then
  return answer({'sold_out', '', '', 0, remaining, reclaimed})
end
remaining = redis.call('DECRBY', KEYS[1], quantity)
if section then
  redis.call('HINCRBY', KEYS[7], section, -quantity)
end
if seats then
  for _, s in ipairs(seats) do
    redis.call('HSET', KEYS[6], s, ARGV[2])
  end
end
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('HSET', KEYS[3], ARGV[2], ARGV[6])
redis.call('ZADD', KEYS[4], ARGV[4], ARGV[2])
return answer({'held', ARGV[2], ARGV[6], tonumber(ARGV[4]), remaining, reclaimed})
