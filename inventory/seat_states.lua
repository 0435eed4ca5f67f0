-- seat_states: the reserved seats some live hold has, for a seat map. Read
-- only. A seat whose hold is past its expiry counts as free, as the hold
-- script counts it (lazy expiry).
--
-- KEYS[1] -> remaining  string  missing means "not loaded"
-- KEYS[2] -> holds      hash    hold id -> record (JSON; c set once confirmed)
-- KEYS[3] -> expiry     zset    hold id -> expires_at (unix ms); pending holds only
-- KEYS[4] -> frozen     string  present while a rebuild loads the keys
-- KEYS[5] -> seats      hash    seat id -> hold id
-- ARGV[1] -> now, unix ms, from the caller's clock
-- returns {outcome, seat id, state, seat id, state, ...}
--   outcome: "ok", "not_loaded" or "frozen" (no seats then)
--   state: "held" (a pending hold not past its expiry) or "sold" (confirmed)
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {'frozen'}
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  return {'not_loaded'}
end
local now = tonumber(ARGV[1])
local out = {'ok'}
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
