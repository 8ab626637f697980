-- dsbf_leaf.lua: create or seal one leaf of a SplittableBloomFilter (its keys share one slot).
-- KEYS[1]: the leaf's hash (state, count), KEYS[2]: its bits, KEYS[3]: its fingerprints.
--   make  nbytes -> 1 if created, 0 if it existed (never touches an existing leaf)
--   seal         -> the fingerprints' length in bytes (8 * count), final from now on (the leaf takes no
--                   more writes: check-and-add answers "M"); -1 if the leaf does not exist
local op = ARGV[1]
if op == 'make' then
  if redis.call('HSETNX', KEYS[1], 'state', 'active') == 0 then return 0 end
  redis.call('HSET', KEYS[1], 'count', 0)
  redis.call('SETRANGE', KEYS[2], tonumber(ARGV[2]) - 1, '\0')
  return 1
elseif op == 'seal' then
  if not redis.call('HGET', KEYS[1], 'state') then return -1 end
  redis.call('HSET', KEYS[1], 'state', 'retired')
  return 8 * tonumber(redis.call('HGET', KEYS[1], 'count'))
end
return redis.error_reply('dsbf_leaf.lua: unknown operation ' .. tostring(op))
