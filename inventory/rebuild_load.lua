-- rebuild_load: load a batch of the ledger's live holds while the keys are
-- frozen. `remaining` is only set by rebuild_finish, so a rebuild cut short
-- leaves the event "not loaded" rather than half loaded.
--
-- KEYS[1] -> remaining  string  seats left to sell (deleted on "reset")
-- KEYS[2] -> users      hash    user id -> hold id
-- KEYS[3] -> holds      hash    hold id -> record (JSON)
-- KEYS[4] -> expiry     zset    hold id -> expires_at (unix ms)
-- KEYS[5] -> frozen     string  the rebuild's fence; must hold ARGV[1]
-- KEYS[6] -> seats      hash    seat id -> hold id (deleted on "reset"),
--                               from the records' seats (s)
-- KEYS[7] -> sections   hash    general-admission section -> places left
--                               (deleted on "reset"; set by rebuild_finish)
-- ARGV[1] -> fence token of this rebuild
-- ARGV[2] -> "reset" for the first batch (clears the keys), "append" after
-- ARGV[3] -> fence ttl, ms (renewed on every batch)
-- ARGV[4..] -> four values per hold: hold id, user id, record (JSON),
--              expires_at ms (-1 for a confirmed hold: not in the expiry index)
-- returns the number of holds loaded; an error when the fence is not ours
if redis.call('GET', KEYS[5]) ~= ARGV[1] then
  return redis.error_reply('ERR rebuild: fence lost')
end
redis.call('PEXPIRE', KEYS[5], ARGV[3])
if ARGV[2] == 'reset' then
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[6], KEYS[7])
end
local n = 0
for i = 4, #ARGV, 4 do
  local id, user, rec, exp = ARGV[i], ARGV[i + 1], ARGV[i + 2], tonumber(ARGV[i + 3])
  redis.call('HSET', KEYS[2], user, id)
  redis.call('HSET', KEYS[3], id, rec)
  local seats = cjson.decode(rec).s
  if seats then
    for _, s in ipairs(seats) do
      redis.call('HSET', KEYS[6], s, id)
    end
  end
  if exp >= 0 then
    redis.call('ZADD', KEYS[4], exp, id)
  end
  n = n + 1
end
return n
