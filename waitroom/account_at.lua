-- account_at.lua: account.lua for the account's position with the moment it
-- was handed out, kept as "<position>:<unix ms>" (a value without the
-- moment, "<position>", was written before it was kept).
--
-- KEYS[1] -> the account's position key of the event
-- ARGV[1] -> the value to claim when the account has none: "<pos>:<ms>"
-- ARGV[2] -> the TTL, milliseconds
-- returns the account's value: ARGV[1] when it was claimed, else the one it
--         already had
local cur = redis.call('GET', KEYS[1])
if cur then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return cur
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return ARGV[1]
