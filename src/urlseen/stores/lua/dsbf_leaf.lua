-- dsbf_leaf.lua: create or seal one leaf of a SplittableBloomFilter (its keys share one slot).
-- KEYS[1]: the leaf's hash (state, count, instance), KEYS[2]: its bits, KEYS[3]: its
-- fingerprints, KEYS[4]: its claims.
--   make  nbytes instance -> 1 if created, 0 if it existed (never touches a leaf of this
--                 instance; one of another instance is a leftover of a filter of the same name
--                 deleted before: it is replaced)
--   seal  instance width -> the fingerprints' length in bytes (width * count), final from now on (the
--                 leaf takes no more writes: check-and-add answers "M"); -1 if the leaf does not
--                 exist or belongs to another instance
local op = ARGV[1]
if op == 'make' then
  local instance = redis.call('HGET', KEYS[1], 'instance')
  if instance == ARGV[3] then return 0 end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
  redis.call('HSET', KEYS[1], 'state', 'active', 'count', 0, 'instance', ARGV[3])
  redis.call('SETRANGE', KEYS[2], tonumber(ARGV[2]) - 1, '\0')
  return 1
elseif op == 'seal' then
  if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[2] then return -1 end
  redis.call('HSET', KEYS[1], 'state', 'retired')
  return tonumber(ARGV[3]) * tonumber(redis.call('HGET', KEYS[1], 'count'))
end
return redis.error_reply('dsbf_leaf.lua: unknown operation ' .. tostring(op))
