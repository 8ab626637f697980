-- bloom_batch.lua: test (and, unless the operation is CONTAINS, set) the bits of a batch of
-- keys in one atomic step, for urlseen's RedisBloomFilter and the leaves of its
-- SplittableBloomFilter; with ADD, claim each key answered new (claims.lua, put in front).
--
-- KEYS[1]: the bits (a string; byte j bit i is filter bit 8j + i, as in a local filter)
-- KEYS[2]: the metadata hash (fields "count": keys reported new, "instance": the filter's
--          random id, set at creation; a leaf's also "state")
-- KEYS[3]: this batch's receipt (COPY only): the answer is kept there for ARGV[3] seconds, so
--          a split that lost a reply sends the same batch again and does not copy it twice
-- KEYS[4]: the claims hash (claims.lua)
-- KEYS[5]: a DSBF leaf's fingerprints: code_bytes (meta) of coded ones, then ARGV[6] bytes per
--          key reported new, in order; or, for
--          a RedisBloomFilter (no write limit, ARGV[7] empty), its claims of whole calls
--          (claims.lua, claims_record: each call's new keys in one field, acknowledged by
--          deleting it; expanded into KEYS[4] before any claim is read or released one by one)
-- KEYS[6]: (RedisBloomFilter) the calling client's staged bits, for a whole rewrite (below);
--          (DSBF leaf) its claims of whole calls, as KEYS[5] is a RedisBloomFilter's
-- ARGV[1]: urlseen._core.byte_masks of the batch; ARGV[4]: "blocked" or "standard" (its format)
-- ARGV[2]: the operation (urlseen.splittable.tree.LeafOp): "0" CONTAINS, test only; "1" ADD,
--          test and set, and claim; "2" COPY, set and count every key as new (a split copying
--          fingerprints into a new leaf: none may be dropped as a false positive); "3" ACK,
--          "4" ABANDON, "5" RENEW: delete, end the lease of, or start a new lease of the
--          caller's claims of the fingerprints (claims.lua); "6" DROP: delete the claims of
--          the fingerprints ARGV[14..] (one each) without reading them: an acknowledgement by a
--          client whose claims are younger than half a lease, so none was taken over (and
--          were one, its URL has reached the caller acknowledging it); no per-key Lua work.
--          A DSBF leaf's DROP takes (field, fingerprints) pairs instead: a record's field
--          ("OWNER CALL", claims_record) and the fingerprints it claimed in this leaf (ARGV[6]
--          bytes each, packed), or "" and fingerprints claimed one by one; a record found is
--          deleted whole, else (expanded since, or "") the fingerprints' claims one by one
-- ARGV[5]: the batch's fingerprints, ARGV[6] bytes per key, in order (the claims' fields; a
--          DSBF leaf stores them too)
-- ARGV[7]: a DSBF leaf's write limit (at this count a leaf takes no more writes until split);
--          empty for a RedisBloomFilter
-- ARGV[8]: the instance the client opened; ARGV[9]: the length of the bits in bytes
-- ARGV[10..13]: the claims' owner, priority, call id and lease in ms (claims.lua)
-- ARGV[14..]: ADD: optional, the count, answers and blocks of a client's snapshot (below, at
--          agreed()); DROP: the fingerprints (a leaf: the pairs above)
-- Returns one character per key: ADD "1" new, "0" seen, "P" pending (claims.lua), "T" new
-- and claimed by a field of its own (with records, KEYS[5] or a leaf's KEYS[6]: below at
-- OWN); CONTAINS "1" absent, "0" present; COPY "1"; ACK/ABANDON/RENEW "1" if the claim was
-- still the caller's; DROP the number of claims deleted. A DSBF leaf appends its count after the
-- answers; an ADD whose ARGV[14..17] it could not take (agreed()) appends "F" last. A leaf
-- returns "M" (moved) instead when it no longer takes writes (sealed by a split,
-- or at its write limit), or "X" when it does not exist or belongs to another instance
-- (expired after a split, or lost: the client asks the tree).
-- Data that vanished is an error reply "URLSEEN-LOST ...", before anything is written.
local CONTAINS, ADD, COPY = '0', '1', '2'
local RELEASE = {['3'] = 'ack', ['4'] = 'abandon', ['5'] = 'renew'}
local DROP = '6'
local op = ARGV[2]
local data, ttl = ARGV[1], tonumber(ARGV[3])
local add = op == ADD or op == COPY
local force, leaf, leaf_count, leaf_tail, code_bytes = op == COPY, ARGV[7] ~= '', 0, 0, 0
local records = leaf and KEYS[6] or KEYS[5]
local fps, fp_size = ARGV[5], tonumber(ARGV[6])

if ttl > 0 then
  local done = redis.call('GET', KEYS[3])
  if done then return done end
end
local meta = redis.call('HMGET', KEYS[2], 'instance', 'state', 'count', 'coded', 'code_bytes')
if meta[1] ~= ARGV[8] then
  if leaf then return 'X' end
  if not meta[1] then
    return redis.error_reply('URLSEEN-LOST ' .. KEYS[2] .. ' is gone')
  end
  return redis.error_reply('URLSEEN-LOST ' .. KEYS[2] .. ' belongs to another filter of the '
                           .. 'same name, created since')
end
if redis.call('STRLEN', KEYS[1]) ~= tonumber(ARGV[9]) then
  return redis.error_reply('URLSEEN-LOST ' .. KEYS[1] .. ' is gone or damaged')
end
local sealed = false
if leaf then
  leaf_count = tonumber(meta[3])
  leaf_tail = leaf_count - (tonumber(meta[4]) or 0) -- its raw fingerprints, after the code
  code_bytes = tonumber(meta[5]) or 0
  sealed = meta[2] ~= 'active'
  if add and sealed then return 'M' end
  if op == ADD and leaf_count >= tonumber(ARGV[7]) then
    return 'M' -- at its write limit: a split is due; the client waits for it (or does it)
  end
  if code_bytes + fp_size * leaf_tail > redis.call('STRLEN', KEYS[5]) then
    return redis.error_reply('URLSEEN-LOST ' .. KEYS[5] .. ' is gone or damaged')
  end
end
local sub, byte, band, bor = string.sub, string.byte, bit.band, bit.bor
local claims
-- The claims of the fingerprints packed in `fps`, deleted unread one by one: how many were.
local function drop_each(fps)
  local list, deleted = {}, 0
  for i = 1, #fps / fp_size do list[i] = sub(fps, fp_size * (i - 1) + 1, fp_size * i) end
  for s = 1, #list, UNPACK_MAX do
    deleted = deleted + redis.call('HDEL', KEYS[4], unpack(list, s, math.min(s + UNPACK_MAX - 1,
                                                                          #list)))
  end
  return deleted
end

if op == DROP and leaf then
  -- No expansion: a record is deleted whole, and one expanded since left per-key claims.
  local deleted = 0
  for s = 14, #ARGV - 1, 2 do
    if ARGV[s] ~= '' and redis.call('HDEL', records, ARGV[s]) == 1 then
      deleted = deleted + #ARGV[s + 1] / fp_size
    else
      deleted = deleted + drop_each(ARGV[s + 1])
    end
  end
  if sealed then return 'M' end -- as RELEASE below
  return deleted
end
if op == DROP then
  if records then claims_expand(records, KEYS[4], fp_size) end
  local deleted = 0
  for s = 14, #ARGV, UNPACK_MAX do
    deleted = deleted + redis.call('HDEL', KEYS[4], unpack(ARGV, s, math.min(s + UNPACK_MAX - 1,
                                                                            #ARGV)))
  end
  if sealed then return 'M' end -- as RELEASE below
  return deleted
end
if op ~= CONTAINS and op ~= COPY then
  claims = claims_context(ARGV[10], ARGV[11], ARGV[12], ARGV[13])
end
local function fp_at(i) return sub(fps, fp_size * (i - 1) + 1, fp_size * i) end

if RELEASE[op] then
  local list = {}
  for i = 1, #fps / fp_size do list[i] = fp_at(i) end
  if records then claims_expand(records, KEYS[4], fp_size) end
  local out = claims_release(claims, KEYS[4], list, RELEASE[op])
  if sealed then return 'M' end -- its claims may be copied to the children: ask them too
  return table.concat(out) .. (leaf and leaf_count or '')
end

-- Reading the bits: one GET of the whole string when it is small next to the batch (a copy
-- costs ~1.5 ns per byte, a GETRANGE or BITFIELD call ~0.8 us: benchmarks/redis_cpu.py),
-- else one GETRANGE per block (blocked) or BITFIELD GETs (standard).
local WHOLE_PER_MASK_BYTE = {blocked = 12, standard = 40}
local whole
if tonumber(ARGV[9]) <= WHOLE_PER_MASK_BYTE[ARGV[4]] * #data then
  whole = redis.call('GET', KEYS[1])
end
local CHUNK = 1000 -- BITFIELD operations per call (unpack is limited to ~8000 values)

-- A leaf's fingerprints fill the first code_bytes (the code dsbf_leaf.lua's fill wrote) +
-- fp_size * (its count less the "coded" ones, kept raw) bytes of KEYS[5]; the rest is room.
-- Below 1 MiB, APPEND and SETRANGE grow a string greedily to twice its size (~6 bytes wasted
-- per 8 kept), so there the string is rebuilt with SET, which allocates exactly, to a size of
-- its own allocator class (jemalloc: 4 classes per power of two), at least 1/8 larger each
-- time (from 256 bytes: a leaf with no code may hold few raw fingerprints). From 1 MiB on, Redis grows a string by 1 MiB at most, a small slack, and rebuilding
-- would copy megabytes inside a script, so SETRANGE grows it.
local function grown_size(need, have)
  local want = math.max(need, have + math.floor(have / 8), 240) + 16
  local p = 1
  while p * 2 < want do p = p * 2 end
  local step = p / 4
  return math.ceil(want / step) * step - 16 -- 16: the string's header and terminator
end

local function append_fingerprints(new_fps, used)
  local have = redis.call('STRLEN', KEYS[5])
  if used + #new_fps <= have or used + #new_fps > 1048576 then
    redis.call('SETRANGE', KEYS[5], used, new_fps)
    return
  end
  local size = grown_size(used + #new_fps, have)
  local old = used > 0 and redis.call('GETRANGE', KEYS[5], 0, used - 1) or ''
  redis.call('SET', KEYS[5], old .. new_fps .. string.rep('\0', size - used - #new_fps))
end

-- A leaf keeps the fingerprint of each key it reported new, `width` bytes each, after the raw
-- ones it holds. The one place that knows the leaf's raw fingerprint format.
local function keep_fingerprints(grew, n, width)
  local kept = {}
  for i = 1, n do
    if grew == true or grew[i] then kept[#kept + 1] = sub(fps, width * (i - 1) + 1, width * i) end
  end
  append_fingerprints(table.concat(kept), code_bytes + leaf_tail * width)
end

-- BITFIELD over the byte `offsets`, in chunks: GET each (values nil: returns offset -> value)
-- or SET each to values[offset] (~1 us a byte).
local function bitfield_bytes(offsets, values)
  local got = {}
  for s = 1, #offsets, CHUNK do
    local cmd, last = {}, math.min(s + CHUNK - 1, #offsets)
    for i = s, last do
      cmd[#cmd + 1] = values and 'SET' or 'GET'
      cmd[#cmd + 1] = 'u8'
      cmd[#cmd + 1] = '#' .. offsets[i]
      if values then cmd[#cmd + 1] = values[offsets[i]] end
    end
    local r = redis.call('BITFIELD', KEYS[1], unpack(cmd))
    for i = s, last do got[offsets[i]] = r[i - s + 1] end
  end
  return got
end

local fell_back = false -- ARGV[14..17] were sent and not taken (agreed()): the reply says so
-- With records (every user of claims): the answer for a key answered new whose claim is its own
-- field of KEYS[4], not in this call's record (taken over, or a resent call's): its client
-- then acknowledges by DROP, which deleting the record would not do.
local OWN = 'T'

-- The answers, once the bits said which keys are new (new[i]): claims (ADD) decide the keys
-- found present and are written, all at once, before the data they cover; then the bits
-- (write_bits()), the count, a leaf's fingerprints, a COPY's receipt.
-- new: per key whether it is new, or (agreed()) the answer string of a batch of new keys.
local function finish(n, new, fresh, write_bits)
  local out = {}
  if op == ADD and type(new) == 'string' then
    if not (records and claims_record(claims, records, fps)) then
      local q = claims_queued(claims, KEYS[4])
      for i = 1, n do claim_new_into(claims, q, fp_at(i), false) end
      if records then new = string.rep(OWN, n) end
    end
    claims_write(claims)
    out = {new}
  elseif op == ADD then
    if records and fresh < n then claims_expand(records, KEYS[4], fp_size) end
    claims_lookup(claims, KEYS[4], n - fresh, function()
      local list = {}
      for i = 1, n do
        if not new[i] then list[#list + 1] = fp_at(i) end
      end
      return list
    end)
    local none = claims_none(claims, KEYS[4])
    local q = claims_queued(claims, KEYS[4])
    local kept, at = records and {}, {} -- this call's new keys, claimed in one record
    for i = 1, n do
      if new[i] then
        if kept then
          local fp = fp_at(i)
          kept[#kept + 1] = fp
          at[#at + 1] = i
          if not none then claims.fresh[fp] = true end
        else
          claim_new_into(claims, q, fp_at(i), not none)
        end
        out[i] = '1'
      elseif none then
        out[i] = '0'
      else
        out[i] = claim_present(claims, KEYS[4], fp_at(i))
        if records and out[i] == '1' then out[i] = OWN end
      end
    end
    if kept and #kept > 0 and not claims_record(claims, records, table.concat(kept)) then
      for j, fp in ipairs(kept) do
        claim_new_into(claims, q, fp, false)
        out[at[j]] = OWN
      end
    end
    claims_write(claims)
  else
    for i = 1, n do out[i] = new[i] and '1' or '0' end
  end
  if not add then return table.concat(out) .. (leaf and leaf_count or '') end
  write_bits()
  if fresh > 0 then redis.call('HINCRBY', KEYS[2], 'count', fresh) end
  local suffix = ''
  if leaf then
    if fresh > 0 then keep_fingerprints(type(new) == 'string' or new, n, fp_size) end
    suffix = leaf_count + fresh
  end
  local answer = table.concat(out) .. suffix .. (fell_back and 'F' or '')
  if ttl > 0 then redis.call('SET', KEYS[3], answer, 'EX', ttl) end
  return answer
end

-- ADD with ARGV[14..17] (blocked layout): the client read the blocks of its batch in a native
-- snapshot and decided the keys from it by this script's own rule (urlseen._core.masks_apply).
-- It sends the filter's count as it read it (ARGV[14]), its answers (ARGV[15], one byte per
-- key: "1" a bit was missing, "0" all set), the blocks its new keys change as the batch leaves
-- them (ARGV[16]: per block its byte offset, 4 bytes little-endian, then its 64 bytes) and the
-- same blocks as read (ARGV[17], 64 bytes each, in the same order). If the count is unchanged
-- no bits were written since (every write of bits adds to it, in every version of this
-- script), else each block is compared with the block as read. If they agree, the answers are
-- this script's (bits are never cleared: a key found set stays set) and the blocks are written
-- as sent, with no Lua work per key: parsing the masks and rebuilding a block per new key cost
-- ~2.5 us of the ~5 us a new key cost. Else (another client wrote one of them since) the batch
-- is decided below from the masks, as without them. (Packed: an argument per block cost the
-- server more than slicing these.)
local function block_at(j)
  local b1, b2, b3, b4 = byte(ARGV[16], 68 * j + 1, 68 * j + 4)
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end

-- A client alone on a small filter may instead stage the whole bits as the batch leaves them
-- in KEYS[6] (SET with an expiry, just before this call; ARGV[16] "S", ARGV[17] empty:
-- `rewrite`), taken only if the count is as read (then nothing was written since the bits it
-- started from) by renaming KEYS[6] over the bits: O(1) here, instead of a SETRANGE per block
-- (~1 us each) or of the whole string from Lua (~1.2 ns per byte, copied three times); the
-- native SET's argument is the string Redis keeps. Not taken, KEYS[6] is deleted.
local STAGED = 'S'
local rewrite = op == ADD and ARGV[16] == STAGED and ARGV[17] == ''

local function agreed(n)
  local said, blocks, olds = ARGV[15], ARGV[16], ARGV[17]
  if rewrite then
    if #said ~= n then return nil end
    if ARGV[14] ~= (meta[3] or '') or redis.call('STRLEN', KEYS[6]) ~= tonumber(ARGV[9]) then
      fell_back = true
      return nil
    end
  elseif not olds or op ~= ADD or #said ~= n or #blocks ~= 68 * (#olds / 64)
      or #olds % 64 ~= 0 then
    return nil
  elseif ARGV[14] ~= (meta[3] or '') then
    for j = 0, #olds / 64 - 1 do
      local base = block_at(j)
      local now = whole and sub(whole, base + 1, base + 64)
                  or redis.call('GETRANGE', KEYS[1], base, base + 63)
      if now ~= sub(olds, 64 * j + 1, 64 * j + 64) then
        fell_back = true
        return nil
      end
    end
  end
  if not string.find(said, '0', 1, true) then return said, n end -- every key new
  local new, fresh = {}, 0
  for i = 1, n do
    local is_new = byte(said, i) == 49
    new[i] = is_new
    if is_new then fresh = fresh + 1 end
  end
  return new, fresh
end

if ARGV[4] == 'blocked' then
  local said, said_fresh = agreed(#fps / fp_size)
  if rewrite and not said then redis.call('DEL', KEYS[6]) end
  if said then
    return finish(#fps / fp_size, said, said_fresh, function()
      if rewrite then
        redis.call('RENAME', KEYS[6], KEYS[1])
        return redis.call('PERSIST', KEYS[1]) -- RENAME kept the stage's expiry
      end
      for j = 0, #ARGV[17] / 64 - 1 do
        redis.call('SETRANGE', KEYS[1], block_at(j), sub(ARGV[16], 68 * j + 5, 68 * j + 68))
      end
    end)
  end
  -- Per key: c, its block's byte offset (4 bytes), c (offset in block, mask) pairs. Its block
  -- is read from the whole string, or with one GETRANGE, unless this batch changed it: then
  -- from `over`, the block as the batch left it (64 bytes, rebuilt per new key with one
  -- byte() and one char(): ~1 us, against ~1 us per changed byte for BITFIELD SET or
  -- for per-byte bookkeeping in Lua tables). One SETRANGE per changed block writes it back.
  local new, n, fresh = {}, 0, 0
  local over, dirty = {}, {}
  local char = string.char
  local pos, len = 1, #data
  while pos <= len do
    local c, b1, b2, b3, b4 = byte(data, pos, pos + 4)
    local base = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    pos = pos + 5
    local block, shift = over[base], 0
    if not block then
      if whole then
        block, shift = whole, base
      else
        block = redis.call('GETRANGE', KEYS[1], base, base + 63)
      end
    end
    local is_new = force
    if not is_new then
      for j = pos, pos + 2 * c - 1, 2 do
        local rel, m = byte(data, j, j + 1)
        if band(byte(block, shift + rel + 1) or 0, m) ~= m then
          is_new = true
          break
        end
      end
    end
    n = n + 1
    new[n] = is_new
    if is_new then fresh = fresh + 1 end
    if is_new and add then
      local t = {byte(block, shift + 1, shift + 64)}
      for j = pos, pos + 2 * c - 1, 2 do
        local rel, m = byte(data, j, j + 1)
        t[rel + 1] = bor(t[rel + 1] or 0, m)
      end
      if not over[base] then dirty[#dirty + 1] = base end
      over[base] = char(unpack(t))
    end
    pos = pos + 2 * c
  end
  return finish(n, new, fresh, function()
    for _, base in ipairs(dirty) do redis.call('SETRANGE', KEYS[1], base, over[base]) end
  end)
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
if whole then
  for _, off in ipairs(order) do cur[off] = byte(whole, off + 1) or 0 end
else
  cur = bitfield_bytes(order)
end

local new, dirty, changed, fresh = {}, {}, {}, 0
for i = 1, #keys do
  local rec, is_new = keys[i], force
  for j = 1, #rec, 2 do
    if band(cur[rec[j]], rec[j + 1]) ~= rec[j + 1] then
      is_new = true
      break
    end
  end
  new[i] = is_new
  if is_new then fresh = fresh + 1 end
  if is_new and add then
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
end

return finish(#keys, new, fresh, function() bitfield_bytes(changed, cur) end)
