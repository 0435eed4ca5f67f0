-- rebuild_finish: end a rebuild: set remaining and lift the fence, or only
-- lift the fence when the rebuild is abandoned.
--
-- KEYS[1] -> remaining  string  seats left to sell
-- KEYS[2] -> frozen     string  the rebuild's fence; must hold ARGV[1]
-- KEYS[3] -> sections   hash    general-admission section -> places left
-- ARGV[1] -> fence token of this rebuild
-- ARGV[2] -> remaining to set, or "" to abandon (remaining is left as it is)
-- ARGV[3] -> with a remaining: the places left of each general-admission
--            section (JSON object; {} for none), set with it
-- returns 1 when the fence was ours, 2 when setting remaining finds the
-- fence gone and remaining set, 0 otherwise (nothing is changed but by 1)
if redis.call('GET', KEYS[2]) ~= ARGV[1] then
  -- A run of this very call whose reply was lost (go-redis runs it again)
  -- leaves this; so does a rebuild that took the fence after ours lapsed
  -- and read the ledger later than we did. Either way the keys are loaded.
  if ARGV[2] ~= '' and redis.call('EXISTS', KEYS[2]) == 0 and redis.call('EXISTS', KEYS[1]) == 1 then
    return 2
  end
  return 0
end
if ARGV[2] ~= '' then
  for section, left in pairs(cjson.decode(ARGV[3])) do
    redis.call('HSET', KEYS[3], section, left)
  end
  redis.call('SET', KEYS[1], ARGV[2])
end
redis.call('DEL', KEYS[2])
return 1
