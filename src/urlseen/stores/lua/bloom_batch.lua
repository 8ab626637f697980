-- bloom_batch.lua: test (and, unless the operation is CONTAINS, set) the bits of a batch of
-- keys in one atomic step, for urlseen's RedisBloomFilter and the leaves of its SplittableBloomFilter.
--
-- KEYS[1]: the bits (a string; byte j bit i is filter bit 8j + i, as in a local filter)
-- KEYS[2]: the metadata hash (field "count": keys reported new)
-- KEYS[3]: this batch's receipt: the answer is kept there for ARGV[3] seconds, so that a
--          client that lost the reply can send the same batch again and get the same answer
--          (no URL is ever reported seen because its first report was lost)
-- KEYS[4]: (a DSBF leaf only) the leaf's fingerprints, 8 bytes per key reported new, in order
-- ARGV[1]: urlseen._core.byte_masks of the batch; ARGV[4]: "blocked" or "standard" (its format)
-- ARGV[2]: the operation (urlseen.stores.splittable.LeafOp): "0" CONTAINS, test only; "1" ADD,
--          test and set; "2" COPY, set and count every key as new (a split copying
--          fingerprints into a new leaf: none may be dropped as a false positive)
-- ARGV[5]: (a DSBF leaf only) the batch's fingerprints, 8 bytes per key, in order
-- ARGV[6]: (a DSBF leaf only) its write limit: at this count a leaf takes no more writes until
--          split
-- Returns one character per key: "1" if some bit was 0 (new / absent), "0" otherwise. A DSBF
-- leaf appends its count after the answers, and returns "M" (moved) instead when it no longer
-- takes writes (sealed by a split, or at its write limit) or no longer exists: the client reloads the
-- tree, and waits for the split or does it.
local done = redis.call('GET', KEYS[3])
if done then return done end

local CONTAINS, ADD, COPY = '0', '1', '2'
local op = ARGV[2]
local data, add, ttl = ARGV[1], op ~= CONTAINS, tonumber(ARGV[3])
local force, leaf, leaf_count = op == COPY, KEYS[4] ~= nil, 0
if leaf then
  local meta = redis.call('HMGET', KEYS[2], 'state', 'count')
  if not meta[1] or (add and meta[1] ~= 'active') then return 'M' end
  leaf_count = tonumber(meta[2])
  if op == ADD and leaf_count >= tonumber(ARGV[6]) then
    return 'M' -- at its write limit: a split is due; the client waits for it (or does it)
  end
end
local band, bor, byte = bit.band, bit.bor, string.byte
local CHUNK = 1000 -- BITFIELD operations per call (unpack is limited to ~8000 values)

-- A leaf's fingerprints fill the first 8 * count bytes of KEYS[4]; the rest is room to grow.
-- Below 1 MiB, APPEND and SETRANGE grow a string greedily to twice its size (~6 bytes wasted
-- per 8 kept), so there the string is rebuilt with SET, which allocates exactly, to a size of
-- its own allocator class (jemalloc: 4 classes per power of two), at least 1/8 larger each
-- time. From 1 MiB on, Redis grows a string by 1 MiB at most, a small slack, and rebuilding
-- would copy megabytes inside a script, so SETRANGE grows it.
local function grown_size(need, have)
  local want = math.max(need, have + math.floor(have / 8), 4096) + 16
  local p = 1
  while p * 2 < want do p = p * 2 end
  local step = p / 4
  return math.ceil(want / step) * step - 16 -- 16: the string's header and terminator
end

local function append_fingerprints(fps, used)
  local have = redis.call('STRLEN', KEYS[4])
  if used + #fps <= have or used + #fps > 1048576 then
    redis.call('SETRANGE', KEYS[4], used, fps)
    return
  end
  local size = grown_size(used + #fps, have)
  local old = used > 0 and redis.call('GETRANGE', KEYS[4], 0, used - 1) or ''
  redis.call('SET', KEYS[4], old .. fps .. string.rep('\0', size - used - #fps))
end

local function finish(out, fresh, cur, changed)
  for s = 1, #changed, CHUNK do
    local cmd, last = {}, math.min(s + CHUNK - 1, #changed)
    for i = s, last do
      cmd[#cmd + 1] = 'SET'
      cmd[#cmd + 1] = 'u8'
      cmd[#cmd + 1] = '#' .. changed[i]
      cmd[#cmd + 1] = cur[changed[i]]
    end
    redis.call('BITFIELD', KEYS[1], unpack(cmd))
  end
  if fresh > 0 then redis.call('HINCRBY', KEYS[2], 'count', fresh) end
  local suffix = ''
  if leaf then
    if fresh > 0 then
      local fps, sub = {}, string.sub
      for i = 1, #out do
        if out[i] == '1' then fps[#fps + 1] = sub(ARGV[5], 8 * i - 7, 8 * i) end
      end
      append_fingerprints(table.concat(fps), leaf_count * 8)
    end
    suffix = leaf_count + fresh
  end
  local answer = table.concat(out) .. suffix
  if add and ttl > 0 then redis.call('SET', KEYS[3], answer, 'EX', ttl) end
  return answer
end

if ARGV[4] == 'blocked' then
  -- Per key: c, its block's byte offset (4 bytes), c (offset in block, mask) pairs. One GETRANGE
  -- of the 64-byte block per key whose bytes this batch has not written yet.
  local out, cur, changed, fresh = {}, {}, {}, 0
  local pos, len = 1, #data
  while pos <= len do
    local c, b1, b2, b3, b4 = byte(data, pos, pos + 4)
    local base = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    pos = pos + 5
    local block, new = nil, false
    for j = pos, pos + 2 * c - 1, 2 do
      local rel, m = byte(data, j, j + 1)
      local v = cur[base + rel]
      if v == nil then
        block = block or redis.call('GETRANGE', KEYS[1], base, base + 63)
        v = byte(block, rel + 1) or 0
      end
      if band(v, m) ~= m then new = true end
    end
    new = new or force
    if new and add then
      fresh = fresh + 1
      for j = pos, pos + 2 * c - 1, 2 do
        local rel, m = byte(data, j, j + 1)
        local off = base + rel
        local v = cur[off]
        if v == nil then
          v = byte(block, rel + 1) or 0
          changed[#changed + 1] = off
        end
        cur[off] = bor(v, m)
      end
    end
    out[#out + 1] = new and '1' or '0'
    pos = pos + 2 * c
  end
  return finish(out, fresh, cur, changed)
end

local keys, order, seen = {}, {}, {}
local pos, len = 1, #data
while pos <= len do
  local c = byte(data, pos)
  pos = pos + 1
  local rec = {}
  for _ = 1, c do
    local b1, b2, b3, b4, m = byte(data, pos, pos + 4)
    local off = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    rec[#rec + 1] = off
    rec[#rec + 1] = m
    if not seen[off] then
      seen[off] = true
      order[#order + 1] = off
    end
    pos = pos + 5
  end
  keys[#keys + 1] = rec
end

local cur = {}
for s = 1, #order, CHUNK do
  local cmd, last = {}, math.min(s + CHUNK - 1, #order)
  for i = s, last do
    cmd[#cmd + 1] = 'GET'
    cmd[#cmd + 1] = 'u8'
    cmd[#cmd + 1] = '#' .. order[i]
  end
  local vals = redis.call('BITFIELD', KEYS[1], unpack(cmd))
  for i = s, last do cur[order[i]] = vals[i - s + 1] end
end

local out, dirty, changed, fresh = {}, {}, {}, 0
for i = 1, #keys do
  local rec, new = keys[i], force
  for j = 1, #rec, 2 do
    if band(cur[rec[j]], rec[j + 1]) ~= rec[j + 1] then
      new = true
      break
    end
  end
  if new and add then
    fresh = fresh + 1
    for j = 1, #rec, 2 do
      local off = rec[j]
      local v = bor(cur[off], rec[j + 1])
      if v ~= cur[off] then
        cur[off] = v
        if not dirty[off] then
          dirty[off] = true
          changed[#changed + 1] = off
        end
      end
    end
  end
  out[i] = new and '1' or '0'
end

return finish(out, fresh, cur, changed)
