-- bits.lua: the bit test and set of urlseen's Bloom batch scripts, put after claims.lua in
-- front of each caller's script: bloom_batch.lua (RedisBloomFilter) and leaf_batch.lua (a
-- leaf of a SplittableBloomFilter). Its functions test (and set) the bits of a batch of keys,
-- take a client's own answers when the blocks it read are unchanged, and answer each key
-- with its claim.
--
-- The bits are a string: byte j bit i is filter bit 8j + i, as in a local filter. A batch's
-- keys come as urlseen._core.byte_masks: per key, blocked layout: c, its 64-byte block's
-- byte offset (4 bytes little-endian), then c (offset in block, mask) byte pairs; standard
-- layout: c, then c (byte offset, 4 bytes little-endian, mask) records.

-- The operations (urlseen.shared.scripts.Op).
local OP_CONTAINS, OP_ADD, OP_COPY = '0', '1', '2'
local OP_ACK, OP_ABANDON, OP_RENEW, OP_DROP = '3', '4', '5', '6'
local RELEASE_HOW = {[OP_ACK] = 'ack', [OP_ABANDON] = 'abandon', [OP_RENEW] = 'renew'}
-- Answers beside claims.lua's NEW, SEEN and PENDING (urlseen.shared.scripts.Answer): OWN, new
-- and claimed by a field of its own (not in the call's record: its client acknowledges it by
-- DROP, which deleting the record would not do); and marks of a whole reply: MOVED (a leaf
-- that takes no more writes), MISSING (a leaf gone or of another instance), FELL_BACK (the
-- client's own answers were not taken).
local OWN, MOVED, MISSING, FELL_BACK = 'T', 'M', 'X', 'F'
local STAGED = 'S' -- optimistic arguments that stage the whole bits (bloom_batch.lua)

local sub, byte, char, band, bor = string.sub, string.byte, string.char, bit.band, bit.bor
local BITFIELD_CHUNK = 1000 -- BITFIELD operations per call (unpack holds ~8000 values)

-- The whole bit string (one GET) when it is small next to the batch's masks, else nil: a copy
-- costs ~1.5 ns per byte, a GETRANGE or BITFIELD call ~0.8 us (benchmarks/redis/cpu.py).
local WHOLE_PER_MASK_BYTE = {blocked = 12, standard = 40}
local function bits_whole(key, nbytes, layout, masks)
  if nbytes <= WHOLE_PER_MASK_BYTE[layout] * #masks then return redis.call('GET', key) end
  return nil
end

-- A 4-byte little-endian number at position `at` of `s`.
local function u32_at(s, at)
  local b1, b2, b3, b4 = byte(s, at, at + 3)
  return b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
end

-- BITFIELD over the byte `offsets` of `key`, in chunks: GET each (values nil: returns
-- offset -> value) or SET each to values[offset].
local function bitfield_bytes(key, offsets, values)
  local got = {}
  for s = 1, #offsets, BITFIELD_CHUNK do
    local cmd, last = {}, math.min(s + BITFIELD_CHUNK - 1, #offsets)
    for i = s, last do
      cmd[#cmd + 1] = values and 'SET' or 'GET'
      cmd[#cmd + 1] = 'u8'
      cmd[#cmd + 1] = '#' .. offsets[i]
      if values then cmd[#cmd + 1] = values[offsets[i]] end
    end
    local r = redis.call('BITFIELD', key, unpack(cmd))
    for i = s, last do got[offsets[i]] = r[i - s + 1] end
  end
  return got
end

-- Blocked layout: per key whether it is new (force: every key; set: set a new key's bits),
-- how many keys, how many new, and a function that writes the changed blocks (a SETRANGE
-- each). A key's block is read from `whole` or by one GETRANGE per block, or, once this batch
-- changed it, from its row: a table of its bytes made once, changed in place per new key.
local function bits_blocked(key, masks, whole, force, set)
  local new, n, fresh = {}, 0, 0
  local rows, read, dirty = {}, {}, {}
  local pos, len = 1, #masks
  while pos <= len do
    local c, b1, b2, b3, b4 = byte(masks, pos, pos + 4) -- u32_at inlined: once per key
    local base = b1 + b2 * 256 + b3 * 65536 + b4 * 16777216
    pos = pos + 5
    local row, block, shift = rows[base], whole, base
    if not row and not whole then
      block, shift = read[base], 0
      if not block then
        block = redis.call('GETRANGE', key, base, base + 63)
        read[base] = block
      end
    end
    local is_new = force
    if not is_new then
      for j = pos, pos + 2 * c - 1, 2 do
        local rel, m = byte(masks, j, j + 1)
        local v = row and row[rel + 1] or not row and byte(block, shift + rel + 1)
        if band(v or 0, m) ~= m then
          is_new = true
          break
        end
      end
    end
    n = n + 1
    new[n] = is_new
    if is_new then fresh = fresh + 1 end
    if is_new and set then
      if not row then
        row = {byte(block, shift + 1, shift + 64)}
        rows[base] = row
        dirty[#dirty + 1] = base
      end
      for j = pos, pos + 2 * c - 1, 2 do
        local rel, m = byte(masks, j, j + 1)
        row[rel + 1] = bor(row[rel + 1] or 0, m)
      end
    end
    pos = pos + 2 * c
  end
  return new, n, fresh, function()
    for _, base in ipairs(dirty) do redis.call('SETRANGE', key, base, char(unpack(rows[base]))) end
  end
end

-- Standard layout: as bits_blocked, reading the bytes from `whole` or with BITFIELD GETs and
-- writing the changed bytes with BITFIELD SETs.
local function bits_standard(key, masks, whole, force, set)
  local keys, order, seen = {}, {}, {}
  local pos, len = 1, #masks
  while pos <= len do
    local c = byte(masks, pos)
    pos = pos + 1
    local rec = {}
    for _ = 1, c do
      local b1, b2, b3, b4, m = byte(masks, pos, pos + 4) -- u32_at inlined: once per bit
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
    cur = bitfield_bytes(key, order)
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
    if is_new and set then
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
  return new, #keys, fresh, function() bitfield_bytes(key, changed, cur) end
end

-- Either layout's bits_blocked or bits_standard.
local function bits_decide(key, masks, layout, whole, force, set)
  if layout == 'blocked' then return bits_blocked(key, masks, whole, force, set) end
  return bits_standard(key, masks, whole, force, set)
end

-- The optimistic path (blocked layout): the client read the blocks of its batch in a native
-- snapshot and decided the keys by this script's own rule (urlseen._core.masks_apply). It
-- sends the count it read (`count`), its answers (`said`: per key NEW or SEEN), the blocks its
-- new keys change as the batch leaves them (`blocks`: per block its byte offset, 4 bytes
-- little-endian, then its 64 bytes) and the same blocks as read (`olds`, 64 bytes each). If
-- the count is unchanged no bits were written since (every write of bits adds to it), else
-- each block is compared with the block as read. If they agree, the answers are this
-- script's (bits are never cleared: a key found set stays set) and the blocks are written as
-- sent, with no Lua work per key. Returns true when they agree, false when a block changed
-- since the read (the script decides the batch), nil when the arguments do not fit a batch
-- of n keys.
local function bits_agreed(key, whole, n, now_count, count, said, blocks, olds)
  if not olds or #said ~= n or #olds % 64 ~= 0 or #blocks ~= 68 * (#olds / 64) then
    return nil
  end
  if count ~= now_count then
    for j = 0, #olds / 64 - 1 do
      local base = u32_at(blocks, 68 * j + 1)
      local now = whole and sub(whole, base + 1, base + 64)
                  or redis.call('GETRANGE', key, base, base + 63)
      if now ~= sub(olds, 64 * j + 1, 64 * j + 64) then return false end
    end
  end
  return true
end

-- The client's answers `said` for n keys taken: the string itself when every key is new, else
-- per key whether new; and how many are.
local function bits_said(said, n)
  if not string.find(said, SEEN, 1, true) then return said, n end
  local new, fresh, new_byte = {}, 0, byte(NEW)
  for i = 1, n do
    local is_new = byte(said, i) == new_byte
    new[i] = is_new
    if is_new then fresh = fresh + 1 end
  end
  return new, fresh
end

-- Write the blocks bits_agreed took (`blocks`, as sent) into `key`.
local function bits_write_blocks(key, blocks)
  for j = 0, #blocks / 68 - 1 do
    redis.call('SETRANGE', key, u32_at(blocks, 68 * j + 1), sub(blocks, 68 * j + 5, 68 * j + 68))
  end
end
