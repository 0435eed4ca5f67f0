-- enter.lua: register a pre-queue entrant, unless the entries are closed.
--
-- KEYS[1] -> the event's lottery hash
-- KEYS[2] -> the event's entrant set
-- ARGV[1] -> the entrant id (the token's subject)
-- ARGV[2] -> when the lottery's records expire, unix milliseconds
-- returns 1 when entered (or entered before), 0 when the entries are closed
if redis.call('HGET', KEYS[1], 'closed') == '1' then
  return 0
end
redis.call('SADD', KEYS[2], ARGV[1])
redis.call('PEXPIREAT', KEYS[2], ARGV[2])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
