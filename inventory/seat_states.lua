-- seat_states: the reserved seats some live hold has, and the places left
-- of each general-admission section, for a seat map. Read only. A seat
-- whose hold is past its expiry counts as free, as the hold script counts
-- it (lazy expiry); so do the places of such a hold.
--
-- KEYS[1] -> remaining  string  missing means "not loaded"
-- KEYS[2] -> holds      hash    hold id -> record (JSON; c set once confirmed)
-- KEYS[3] -> expiry     zset    hold id -> expires_at (unix ms); pending holds only
-- KEYS[4] -> frozen     string  present while a rebuild loads the keys
-- KEYS[5] -> seats      hash    seat id -> hold id
-- KEYS[6] -> sections   hash    general-admission section -> places left
-- ARGV[1] -> now, unix ms, from the caller's clock
-- returns {outcome, m, section, places left, ... (m pairs),
--          seat id, state, seat id, state, ...}
--   outcome: "ok", "not_loaded" or "frozen" (nothing else then)
--   state: "held" (a pending hold not past its expiry) or "sold" (confirmed)
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {'frozen'}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded'}
end
local now = tonumber(ARGV[1])
local left = {}
local sections = redis.call('HGETALL', KEYS[6])
for i = 1, #sections, 2 do
  left[sections[i]] = tonumber(sections[i + 1])
end
-- Places of lapsed holds not reclaimed yet are free.
local lapsed = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', '(' .. ARGV[1])
for _, id in ipairs(lapsed) do
  local rec = redis.call('HGET', KEYS[2], id)
  if rec and string.find(rec, '"g":', 1, true) then
    local r = cjson.decode(rec)
    if r.g and left[r.g] then
      left[r.g] = left[r.g] + r.q
    end
  end
end
local out = {'ok', math.floor(#sections / 2)}
for i = 1, #sections, 2 do
  out[#out + 1] = sections[i]
  out[#out + 1] = left[sections[i]]
end
local state = {}
local owners = redis.call('HGETALL', KEYS[5])
for i = 1, #owners, 2 do
  local id = owners[i + 1]
  local st = state[id]
  if st == nil then
    st = false
    local exp = redis.call('ZSCORE', KEYS[3], id)
    if exp then
      if tonumber(exp) >= now then
        st = 'held'
      end
    elseif redis.call('HEXISTS', KEYS[2], id) == 1 then
      st = 'sold'
    end
    state[id] = st
  end
  if st then
    out[#out + 1] = owners[i]
    out[#out + 1] = st
  end
end
return out
