-- library_buckets.lua: the buckets of urlseen's Redis fingerprint library, put in front of
-- library_batch.lua (which describes the layout). Each group's buckets grow by linear
-- hashing, one bucket split at a time, so that a small library takes few keys and no bucket
-- outgrows Redis's compact (listpack) encoding.

-- Each fingerprint's hash h (bytes 5-8), and the call's segments: runs of consecutive
-- positions of one group (a claim's or contains' client sends its fingerprints sorted by
-- group: library.py, bucket_order), each group's in order (segments_of), its size, and the
-- groups touched.
local function buckets_segments(data, n, groups)
  local byte = string.byte
  local hash_at, seg_start, seg_end, segments_of, sizes, touched = {}, {}, {}, {}, {}, {}
  local current, segments = nil, 0
  for i = 1, n do
    local b1, b2, b3, b4, b5, b6, b7, b8 = byte(data, 16 * i - 15, 16 * i - 8)
    local g = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % groups
    hash_at[i] = ((b5 * 256 + b6) * 256 + b7) * 256 + b8
    if g ~= current then
      if segments > 0 then seg_end[segments] = i - 1 end
      segments, current = segments + 1, g
      seg_start[segments] = i
      local of = segments_of[g]
      if of then
        of[#of + 1] = segments
      else
        segments_of[g], sizes[g] = {segments}, 0
        touched[#touched + 1] = g
      end
    end
  end
  if segments > 0 then seg_end[segments] = n end
  for g, of in pairs(segments_of) do
    for _, k in ipairs(of) do sizes[g] = sizes[g] + seg_end[k] - seg_start[k] + 1 end
  end
  return hash_at, seg_start, seg_end, segments_of, sizes, touched
end

-- The positions of a group's segments (of), in order.
local function buckets_positions(of, seg_start, seg_end)
  local list = {}
  for _, k in ipairs(of) do
    for i = seg_start[k], seg_end[k] do list[#list + 1] = i end
  end
  return list
end

-- Each touched group's counters read and checked (its instance, its numbers) and the caller's
-- write mark advanced (mark.lua), one read each: level, split, count by group, whether the
-- call was resent, each group's key head (prefix .. g .. "}": Lua formats a number with
-- sprintf, so once); or nil and the error, before any write. expect: {g, mark} as strings.
local function groups_open(touched, prefix, instance, owner, expect)
  local level, split, count, head, resent = {}, {}, {}, {}, false
  for _, g in ipairs(touched) do
    local want = expect[g] or {tostring(g), '0'}
    local top = prefix .. want[1] .. '}'
    local marker = top .. ':n'
    local found = redis.call('HMGET', marker, 'instance', 'count', 'level', 'split',
                             'w:' .. owner, 'rolled_back')
    if found[1] ~= instance then
      return nil, 'URLSEEN-LOST ' .. marker .. (found[1] and ' belongs to another library of '
                                                .. 'the same name' or ' is gone')
    end
    local n, l, s = tonumber(found[2] or 0), tonumber(found[3] or 0), tonumber(found[4] or 0)
    if not (n and l and s) then
      local name = not n and 'count' or (not l and 'level' or 'split')
      return nil, 'URLSEEN-DAMAGED Redis key ' .. marker .. ': field ' .. name ..
                  ' is not a number'
    end
    count[g], level[g], split[g], head[g] = n, l, s, top
    local have, mark = tonumber(found[5] or '0'), tonumber(want[2])
    if have == mark + 1 then resent = true end
    local went_back = mark_advance_read(marker, owner, want[2], found[5], found[6], have, mark)
    if went_back then return nil, went_back end
  end
  return level, split, count, head, resent
end

-- A group's buckets: their keys are `head` .. b (head = prefix .. g .. "}:f:"); level L and
-- split pointer s, as the group's counters hold them.
local function buckets_of(head, level, split)
  return {head = head, level = level, split = split, span = 2 ^ level, keys = {}, moved = false}
end

-- The key of bucket n of the group's buckets b, made once per call.
local function bucket_name(b, n)
  local key = b.head .. n
  b.keys[n] = key
  return key
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

local RUN_MAX = 1000 -- fingerprints per HMGET or HSET of one bucket's run

-- A writer of records in runs of one bucket: put(key, field, value) queues a record, put()
-- writes what is queued (one HSET per run); each returns how many records were new so far.
local function buckets_writer()
  local fields, filled, last, added = {}, 0, nil, 0
  return function(key, field, value)
    if filled > 0 and (key ~= last or filled >= 2 * RUN_MAX) then
      added = added + redis.call('HSET', last, unpack(fields, 1, filled))
      filled = 0
    end
    if key then
      fields[filled + 1], fields[filled + 2], filled, last = field, value, filled + 2, key
    end
    return added
  end
end

-- The present records' sightings in a call (key, fingerprint, value read, references gained:
-- met of them): refs up (at most 2^32 - 1), last seen = now.
local function records_bump(keys, fps, values, refs, met, now)
  local put = buckets_writer()
  for k = 1, met do
    if refs[k] > 0 then
      local r, first_seen, last_seen = struct.unpack('<I4I4I4', values[k])
      if now > last_seen then last_seen = now end
      r = math.min(r + refs[k], 4294967295)
      put(keys[k], fps[k], struct.pack('<I4I4I4', r, first_seen, last_seen))
    end
  end
  put()
end

-- A group's new records (a: fingerprints fp, references refs (nil: 1), positions at whose
-- hash is hash_at[at]; n of them) written, the group split first as far as its new count
-- needs (the same buckets as splitting while inserting); how many were new.
local function buckets_insert(b, count, per_bucket, a, hash_at, now)
  while count + a.n > buckets_room(b, per_bucket) do bucket_split(b) end
  local keys, span, cut, fps, at, refs = b.keys, b.span, b.split, a.fp, a.at, a.refs
  local put, fresh = buckets_writer(), struct.pack('<I4I4I4', 1, now, now)
  for j = 1, a.n do
    local h, r = hash_at[at[j]], refs[j] or 1
    local bucket = h % span
    if bucket < cut then bucket = h % (2 * span) end
    put(keys[bucket] or bucket_name(b, bucket), fps[j],
        r == 1 and fresh or struct.pack('<I4I4I4', r, now, now))
  end
  return put()
end
