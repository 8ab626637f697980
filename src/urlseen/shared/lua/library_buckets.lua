-- library_buckets.lua: the buckets of urlseen's Redis fingerprint library, put in front of
-- library_batch.lua (which describes the layout). Each group's buckets grow by linear
-- hashing, one bucket split at a time, so that a small library takes few keys and no bucket
-- outgrows Redis's compact (listpack) encoding.

-- A group's buckets: their keys are `head` .. b (head = prefix .. g .. "}:f:"); level L and
-- split pointer s, as the group's counters hold them.
local function buckets_of(head, level, split)
  return {head = head, level = level, split = split, span = 2 ^ level, keys = {}, moved = false}
end

-- How many records the group holds at most before its next split.
local function buckets_room(b, per_bucket)
  return per_bucket * (b.span + b.split)
end

-- Split the group's next bucket s: its records whose hash has bit L set move to bucket
-- s + 2^L; s advances, and at 2^L the level goes up and s is 0 again. Both buckets are
-- written anew (an HDEL per moved record would scan the old bucket once each).
local function bucket_split(b)
  local old = b.head .. b.split
  local all = redis.call('HGETALL', old)
  local kept, taken = {}, {}
  for j = 1, #all, 2 do
    local b5, b6, b7, b8 = string.byte(all[j], 5, 8)
    local into = kept
    if math.floor((((b5 * 256 + b6) * 256 + b7) * 256 + b8) / b.span) % 2 == 1 then
      into = taken
    end
    into[#into + 1] = all[j]
    into[#into + 1] = all[j + 1]
  end
  if #taken > 0 then
    redis.call('DEL', old)
    if #kept > 0 then claims_each('HSET', old, kept) end
    claims_each('HSET', b.head .. (b.split + b.span), taken)
  end
  b.split = b.split + 1
  if b.split == b.span then b.level, b.split, b.span = b.level + 1, 0, 2 * b.span end
  b.moved = true
end
