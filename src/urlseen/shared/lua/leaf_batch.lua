-- leaf_batch.lua: one operation on a batch of keys in one leaf of a SplittableBloomFilter, in
-- one atomic step: test (and, with ADD or COPY, set) their bits, ADD claiming each key
-- answered new; or release or drop the caller's claims. claims.lua, bits.lua and
-- batch_claims.lua are put in front (dsbf_batch.lua runs it for several leaves in one call).
--
-- KEYS: bits meta receipt claims fps records
-- ARGV: masks op receipt_ttl layout fps fp_bytes write_limit instance nbytes
--       owner priority call lease_ms mark
-- (urlseen.shared.scripts.LEAF_BATCH builds them; the operation's tail follows ARGV)
--
-- bits: the leaf's bits (bits.lua); meta: its hash (state, count: keys reported new,
-- instance: the filter's random id, coded and code_bytes: the URLs and length of the coded
-- fingerprints at the start of `fps`); receipt: this call's receipt (COPY only): the answer
-- is kept there receipt_ttl seconds, so a split that lost a reply sends the same batch again
-- and does not copy it twice; claims, records: the leaf's claims per key and of whole calls
-- (claims.lua); fps: the leaf's fingerprints, the code then fp_bytes per key reported new.
-- op: urlseen.shared.scripts.Op: CONTAINS; ADD; COPY (a split copying fingerprints into a
-- new leaf: set, and count every key as new, for none may be dropped as a false positive);
-- ACK, ABANDON, RENEW; DROP. masks: urlseen._core.byte_masks of the batch; fps: its
-- fingerprints; write_limit: at this count the leaf takes no more writes until split; nbytes:
-- the bits' length; mark: the caller's write mark in the leaf's meta as it expects it
-- (mark.lua; "" for a call that claims nothing: a split's copies); the rest as
-- bloom_batch.lua's.
-- The tail: ADD: none, or the optimistic path's count, answers, blocks and blocks as read
-- (bits.lua, bits_agreed); DROP: (field, fingerprints) pairs: a record's field ("OWNER
-- CALL", claims_record) and the fingerprints it claimed in this leaf, packed, or "" and
-- fingerprints claimed one by one; a record found is deleted whole, else (expanded since, or
-- "") the fingerprints' claims one by one.
--
-- Returns as bloom_batch.lua, followed by the leaf's count (but for DROP); MOVED instead when
-- the leaf takes no more writes (sealed by a split, or at its write limit; a release on a
-- sealed leaf is done and answers MOVED too: its claims may be in its children as well);
-- MISSING when the leaf does not exist or belongs to another instance (the client asks the
-- tree). Data that vanished is an error reply "URLSEEN-LOST ...", before anything is written.
local masks, op, ttl, layout = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local fps, width, limit = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local instance, nbytes = ARGV[8], tonumber(ARGV[9])
local TAIL = 14 -- ARGV before the operation's tail
local bits_key, meta_key, receipt_key, claims_key, fps_key, records_key = KEYS[1], KEYS[2],
                                                                          KEYS[3], KEYS[4],
                                                                          KEYS[5], KEYS[6]

if ttl > 0 then
  local done = redis.call('GET', receipt_key)
  if done then return done end
end
local meta = redis.call('HMGET', meta_key, 'instance', 'state', 'count', 'coded', 'code_bytes')
if meta[1] ~= instance then return MISSING end
if redis.call('STRLEN', bits_key) ~= nbytes then
  return redis.error_reply('URLSEEN-LOST ' .. bits_key .. ' is gone or damaged')
end
for i, name in ipairs({'count', 'coded', 'code_bytes'}) do
  local value = meta[i + 2]
  if (value or i == 1) and not tonumber(value or '') then
    return redis.error_reply('URLSEEN-DAMAGED Redis key ' .. meta_key .. ': field ' .. name
                             .. ' is not a number')
  end
end
if ARGV[14] ~= '' then
  local went_back = mark_advance(meta_key, ARGV[10], ARGV[14])
  if went_back then return redis.error_reply(went_back) end
end
local count = tonumber(meta[3])
local raw = count - (tonumber(meta[4]) or 0) -- its raw fingerprints, after the code
local code_bytes = tonumber(meta[5]) or 0
local sealed = meta[2] ~= 'active'
local set = op == OP_ADD or op == OP_COPY
if set and sealed then return MOVED end
if op == OP_ADD and count >= limit then
  return MOVED -- at its write limit: a split is due; the client waits for it (or does it)
end
if code_bytes + width * raw > redis.call('STRLEN', fps_key) then
  return redis.error_reply('URLSEEN-LOST ' .. fps_key .. ' is gone or damaged')
end

if op == OP_DROP then
  -- No expansion: a record is deleted whole, and one expanded since left per-key claims.
  local deleted = 0
  for s = TAIL + 1, #ARGV - 1, 2 do
    if ARGV[s] ~= '' and redis.call('HDEL', records_key, ARGV[s]) == 1 then
      deleted = deleted + #ARGV[s + 1] / width
    else
      deleted = deleted + batch_drop_each(claims_key, batch_split(ARGV[s + 1], width), 1)
    end
  end
  if sealed then return MOVED end
  return deleted
end
local claims
if op ~= OP_CONTAINS and op ~= OP_COPY then
  claims = claims_context(ARGV[10], ARGV[11], ARGV[12], ARGV[13])
end
if RELEASE_HOW[op] then
  local out = batch_release(claims, claims_key, records_key, fps, width, RELEASE_HOW[op])
  if sealed then return MOVED end
  return out .. count
end

-- The leaf's fingerprints fill the first code_bytes + width * raw bytes of `fps_key`; the
-- rest is room. Below 1 MiB, APPEND and SETRANGE grow a string greedily to twice its size
-- (~6 bytes wasted per 8 kept), so there the string is rebuilt with SET, which allocates
-- exactly, to the smallest size of its own allocator class (jemalloc: 4 classes per power of
-- two, so each step is 1/8 to 1/4 larger) that holds them (from 256 bytes: a leaf with no code
-- may hold few raw fingerprints): the room is the allocator's own rounding. From 1 MiB on, Redis grows a string by 1 MiB at most, a small slack, and
-- rebuilding would copy megabytes inside a script, so SETRANGE grows it.
local function grown_size(need, have)
  local want = math.max(need, have + 1, 240) + 16
  local p = 1
  while p * 2 < want do p = p * 2 end
  local step = p / 4
  return math.ceil(want / step) * step - 16 -- 16: the string's header and terminator
end

-- Append the fingerprint of each key reported new (new: per key, or a string: every key) after
-- the raw ones the leaf holds. The one place that knows the leaf's raw fingerprint format.
local function keep_fingerprints(new, n)
  local kept = {}
  for i = 1, n do
    if type(new) == 'string' or new[i] then
      kept[#kept + 1] = sub(fps, width * (i - 1) + 1, width * i)
    end
  end
  local added, used = table.concat(kept), code_bytes + raw * width
  local have = redis.call('STRLEN', fps_key)
  if used + #added <= have or used + #added > 1048576 then
    redis.call('SETRANGE', fps_key, used, added)
    return
  end
  local size = grown_size(used + #added, have)
  local old = used > 0 and redis.call('GETRANGE', fps_key, 0, used - 1) or ''
  redis.call('SET', fps_key, old .. added .. string.rep('\0', size - used - #added))
end

local whole = bits_whole(bits_key, nbytes, layout, masks)
local new, n, fresh, write, fell_back
if op == OP_ADD and layout == 'blocked' and ARGV[TAIL + 4] then
  n = #fps / width
  local said, blocks = ARGV[TAIL + 2], ARGV[TAIL + 3]
  local agreed = bits_agreed(bits_key, whole, n, meta[3] or '', ARGV[TAIL + 1], said, blocks,
                             ARGV[TAIL + 4])
  if agreed then
    new, fresh = bits_said(said, n)
    write = function() bits_write_blocks(bits_key, blocks) end
  end
  fell_back = agreed == false
end
if not new then
  new, n, fresh, write = bits_decide(bits_key, masks, layout, whole, op == OP_COPY, set)
end
local answer
if op == OP_ADD then
  answer = batch_answers(claims, claims_key, records_key, fps, width, n, new, fresh)
else
  answer = batch_plain_answers(n, new)
end
if not set then return answer .. count end
write()
if fresh > 0 then
  redis.call('HINCRBY', meta_key, 'count', fresh)
  keep_fingerprints(new, n)
end
answer = answer .. (count + fresh) .. (fell_back and FELL_BACK or '')
if ttl > 0 then redis.call('SET', receipt_key, answer, 'EX', ttl) end
return answer
