-- dsbf_batch.lua: one LeafOp on several leaves of a SplittableBloomFilter in one script call
-- (a single server: on a Cluster each leaf has its own slot, and gets its own call).
--
-- Put after what leaf_batch.lua needs (scripts.LEAF_BATCH) and after leaf_batch.lua wrapped as
-- `local function leaf_batch(KEYS, ARGV) ... end` (shared/leaf_batch.py does): each leaf is exactly one leaf_batch.lua call,
-- with its checks and answers, so the leaves' rules live in one place; what this saves is the
-- server's cost per script call, paid once per batch instead of once per leaf (a batch of new
-- URLs touches many leaves, each twice: to check and to acknowledge).
--
-- KEYS: leaf_batch.lua's KEYS[1..6] of each leaf, six per leaf.
-- ARGV[1..9]: what every leaf shares: the operation, receipt ttl, layout, fingerprint width,
--   instance, and the claims' owner, priority, call id and lease (leaf_batch.lua's ARGV[2],
--   [3], [4], [6], [8], [10..13]);
-- then per leaf its masks, fingerprints, write limit, bits' length and write mark (ARGV[1],
--   [5], [7], [9], [14]), a count m and m arguments more, its ARGV[15..] (ADD: the
--   optimistic path's; DROP: the
--   (field, fingerprints) pairs; else m = 0).
-- Returns one leaf_batch.lua answer per leaf, in order; the first error reply (URLSEEN-LOST)
-- stops the call and is its answer, as it stops the batch.
local out, a = {}, 9
for i = 0, #KEYS / 6 - 1 do
  local k = 6 * i
  local args = {ARGV[a + 1], ARGV[1], ARGV[2], ARGV[3], ARGV[a + 2], ARGV[4], ARGV[a + 3],
                ARGV[5], ARGV[a + 4], ARGV[6], ARGV[7], ARGV[8], ARGV[9], ARGV[a + 5]}
  local m = tonumber(ARGV[a + 6])
  for j = 1, m do args[14 + j] = ARGV[a + 6 + j] end
  a = a + 6 + m
  local answer = leaf_batch({KEYS[k + 1], KEYS[k + 2], KEYS[k + 3], KEYS[k + 4], KEYS[k + 5],
                             KEYS[k + 6]}, args)
  if type(answer) == 'table' then return answer end
  out[i + 1] = answer
end
return out
