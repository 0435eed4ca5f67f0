-- account.lua: the one queue position of an account (user_id) in an event.
--
-- The first position claimed for the account is its position for as long
-- as the key lives; every claim, the first and later ones, keeps it alive
-- for the TTL again, so an account that keeps polling keeps its place.
--
-- KEYS[1] -> the account's position key of the event
-- ARGV[1] -> the position to claim when the account has none
-- ARGV[2] -> the TTL, milliseconds
-- returns the account's position: ARGV[1] when it was claimed, else the one
--         it already had
local cur = redis.call('GET', KEYS[1])
if cur then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return tonumber(cur)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return tonumber(ARGV[1])
