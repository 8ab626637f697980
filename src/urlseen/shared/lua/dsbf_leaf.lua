-- dsbf_leaf.lua: create or seal one leaf of a SplittableBloomFilter (its keys share one slot).
-- KEYS[1]: the leaf's hash (state, count, instance; coded and code_bytes: the URLs and length
-- of the coded fingerprints at the start of KEYS[3]), KEYS[2]: its bits, KEYS[3]: its
-- fingerprints (the code, then the raw ones), KEYS[4]: its claims, KEYS[5] (make only): its
-- claims of whole calls (records).
--   make  nbytes instance -> 1 if created, 0 if it existed (never touches a leaf of this
--                 instance; one of another instance is a leftover of a filter of the same name
--                 deleted before: it is replaced)
--   seal  instance width coded -> the raw fingerprints' length in bytes (width * (count -
--                 coded)), final from now on (the leaf takes no more writes: check-and-add
--                 answers "M"); -1 if the leaf does not exist or belongs to another instance, -2
--                 (not sealed) if its code holds other than `coded` URLs (compacted since the
--                 splitter read it: its offsets into the raw ones are stale)
--   compact instance width coded raw_bytes code -> 1 once `code` (the leaf's coded URLs, then
--                 the first raw_bytes of its raw ones, coded together) replaced them, the raw
--                 ones written since kept after it; "M" if the leaf is sealed or its code
--                 changed since it was read (it holds other than `coded` URLs), "X" if it is
--                 gone or another instance's
--   fill  instance count token bits fps width -> a split's copy into a fresh child without a
--                 loop in Lua: the client read the child (count URLs) and set the copied
--                 fingerprints' bits itself; this replaces the bits, appends fps and counts them.
--                 1 when done (or done already by this token: a resent fill), "X" when the child
--                 is gone or another instance's, "M" when it changed since it was read (the
--                 client copies through leaf_batch.lua instead). With `code n` after width
--                 (a fresh child only: count 0), KEYS[3] starts with the code (the split's coded
--                 fingerprints, fps then empty) and the leaf counts n coded URLs.
local op = ARGV[1]
if op == 'make' then
  local instance = redis.call('HGET', KEYS[1], 'instance')
  if instance == ARGV[3] then return 0 end
  redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4], KEYS[5])
  redis.call('HSET', KEYS[1], 'state', 'active', 'count', 0, 'instance', ARGV[3])
  redis.call('SETRANGE', KEYS[2], tonumber(ARGV[2]) - 1, '\0')
  return 1
elseif op == 'seal' then
  if redis.call('HGET', KEYS[1], 'instance') ~= ARGV[2] then return -1 end
  local counts = redis.call('HMGET', KEYS[1], 'count', 'coded')
  local coded = tonumber(counts[2]) or 0
  if ARGV[4] and coded ~= tonumber(ARGV[4]) then return -2 end
  redis.call('HSET', KEYS[1], 'state', 'retired')
  return tonumber(ARGV[3]) * (tonumber(counts[1]) - coded)
elseif op == 'compact' then
  local meta = redis.call('HMGET', KEYS[1], 'instance', 'state', 'count', 'coded', 'code_bytes')
  if meta[1] ~= ARGV[2] then return 'X' end
  local width, taken = tonumber(ARGV[3]), tonumber(ARGV[5])
  local coded, code_bytes = tonumber(meta[4]) or 0, tonumber(meta[5]) or 0
  if meta[2] ~= 'active' or coded ~= tonumber(ARGV[4]) then return 'M' end
  local used = code_bytes + (tonumber(meta[3]) - coded) * width
  local from = code_bytes + taken
  local rest = used > from and redis.call('GETRANGE', KEYS[3], from, used - 1) or ''
  if #rest ~= math.max(0, used - from) or taken % width ~= 0 then
    return redis.error_reply('URLSEEN-LOST ' .. KEYS[3] .. ' is gone or damaged')
  end
  redis.call('SET', KEYS[3], ARGV[6] .. rest)
  redis.call('HSET', KEYS[1], 'coded', coded + taken / width, 'code_bytes', #ARGV[6])
  return 1
elseif op == 'fill' then
  local meta = redis.call('HMGET', KEYS[1], 'instance', 'state', 'count', 'filled', 'coded',
                          'code_bytes')
  if meta[1] ~= ARGV[2] then return 'X' end
  if meta[4] == ARGV[4] then return 1 end
  if meta[2] ~= 'active' or meta[3] ~= ARGV[3] then return 'M' end
  if redis.call('STRLEN', KEYS[2]) ~= #ARGV[5] then
    return redis.error_reply('URLSEEN-LOST ' .. KEYS[2] .. ' is gone or damaged')
  end
  local coded, code_bytes = tonumber(meta[5]) or 0, tonumber(meta[6]) or 0
  local count = tonumber(ARGV[3])
  if ARGV[8] and count ~= 0 then return 'M' end -- a code goes into a fresh child only
  local used = code_bytes + (count - coded) * tonumber(ARGV[7])
  local old = used > 0 and redis.call('GETRANGE', KEYS[3], 0, used - 1) or ''
  if #old ~= used then
    return redis.error_reply('URLSEEN-LOST ' .. KEYS[3] .. ' is gone or damaged')
  end
  if ARGV[8] then
    old, coded, code_bytes, count = ARGV[8], tonumber(ARGV[9]), #ARGV[8], tonumber(ARGV[9])
  end
  redis.call('SET', KEYS[2], ARGV[5])
  if #old + #ARGV[6] > 0 then redis.call('SET', KEYS[3], old .. ARGV[6]) end
  redis.call('HSET', KEYS[1], 'count', count + #ARGV[6] / tonumber(ARGV[7]), 'coded', coded,
             'code_bytes', code_bytes, 'filled', ARGV[4])
  return 1
end
return redis.error_reply('dsbf_leaf.lua: unknown operation ' .. tostring(op))
