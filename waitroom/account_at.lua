-- account_at.lua: the one queue position of an account (user_id) in an
-- event, or of a pre-queue token outside the draw, with the moment it was
-- handed out, kept as "<position>:<unix ms>" ("<position>" alone when
-- nothing says, or written before the moment was kept).
--
-- The first position claimed is the one for as long as the key lives;
-- every claim, the first and later ones, keeps it alive for the TTL again,
-- so an account that keeps polling keeps its place.
--
-- KEYS[1] -> the account's (or the pre-queue token's) position key
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
