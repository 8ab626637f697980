-- library_batch.lua: one batch of fingerprints against urlseen's Redis fingerprint library
-- (RedisLibrary), in one atomic step; claim mode also claims each fingerprint answered new
-- (claims.lua and mark.lua, put in front).
--
-- KEYS: receipt
-- ARGV: mode fps prefix groups per_bucket now receipt_ttl instance
--       owner priority call lease_ms marks
-- (urlseen.shared.scripts.LIBRARY_BATCH builds them)
--
-- Group g = the fingerprint's first 4 bytes (big-endian) mod groups; the group is the hash
-- tag, so a Redis Cluster spreads groups over its slots and one call touches one group's
-- slot. Each group's records live in bucket hashes prefix .. g .. "}:f:" .. b, grown by
-- linear hashing so that a small library takes few keys and every bucket stays listpack
-- encoded: with the group's level L and split pointer s, h = the fingerprint's bytes 5-8
-- (big-endian), b = h mod 2^L, or h mod 2^(L+1) where that is below s. When the group holds
-- more than per_bucket records per bucket, bucket s splits into s and s + 2^L (s advances; at
-- 2^L, L goes up and s is 0 again). The field is the whole 16-byte fingerprint, the value 12
-- bytes, little-endian: refs, first_seen, last_seen (u32 each, Unix seconds).
-- Claims (claims.lua) are fields of the group's hash prefix .. g .. "}:c", field = the
-- fingerprint, written before the records they cover and deleted on acknowledgement: a
-- client that acknowledges each batch leaves none, and a batch with none in its groups looks
-- none up.
-- Each group has a hash prefix .. g .. "}:n" (fields "count": its records, "level",
-- "split": its linear hashing, "instance": the library's random id, written when the library
-- was made, and the clients' write marks).
--
-- receipt: a release's or forget's answer is kept there receipt_ttl seconds, so one resent
--          after a lost reply gets the same answer and changes nothing twice. A claim needs
--          none: its write mark says it ran already (mark.lua: the stored mark is one more
--          than the client expects), and then it writes no record again and answers from the
--          claims: the fingerprints this very call claimed are new again (claims.lua).
-- mode: "claim" (insert if absent, else one more reference), "contains" (read only),
--       "release" (one reference less; the record goes at zero), "forget" (remove), "ack",
--       "abandon", "renew" (delete, end the lease of, or start a new lease of the caller's
--       claims: claims.lua)
-- fps: the fingerprints, 16 bytes each, concatenated; now: Unix seconds; instance: the
-- instance the client opened; owner, priority, call, lease_ms: the claims' (claims.lua);
-- marks: "g:n ..." the caller's write mark in each group it touches, as it expects it
-- (mark.lua: a group that went back in time answers "URLSEEN-ROLLBACK ...")
-- Returns one character per fingerprint: claim: NEW, SEEN or PENDING (claims.lua); contains,
-- release, forget: NEW was present, SEEN not; ack, abandon, renew: NEW the claim was still
-- the caller's. A group whose data vanished is an error reply "URLSEEN-LOST ...", before
-- anything is written.
local mode, data, prefix, groups = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local per_bucket, now, ttl, instance = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]),
                                       ARGV[8]
local owner = ARGV[9]
local receipt_key = KEYS[1]
local receipts = mode == 'release' or mode == 'forget'
if receipts then
  local done = redis.call('GET', receipt_key)
  if done then return done end
end

local byte, sub, floor = string.byte, string.sub, math.floor
local pack, unpack = struct.pack, struct.unpack
local MAXREFS = 4294967295
local n = #data / 16

-- Each fingerprint's group, and each group's fingerprints (positions) in order.
local group_at, members, touched = {}, {}, {}
for i = 1, n do
  local b1, b2, b3, b4 = byte(data, 16 * i - 15, 16 * i - 12)
  local g = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % groups
  group_at[i] = g
  local m = members[g]
  if not m then
    m = {}
    members[g] = m
    touched[#touched + 1] = g
  end
  m[#m + 1] = i
end
table.sort(touched)

local expect = {}
for g, mark in string.gmatch(ARGV[13], '(%d+):(%d+)') do expect[tonumber(g)] = mark end
local level, split, count, resent = {}, {}, {}, false
for _, g in ipairs(touched) do
  local marker = prefix .. g .. '}:n'
  local found = redis.call('HMGET', marker, 'instance', 'count', 'level', 'split', 'w:' .. owner)
  if found[1] ~= instance then
    if not found[1] then
      return redis.error_reply('URLSEEN-LOST ' .. marker .. ' is gone')
    end
    return redis.error_reply('URLSEEN-LOST ' .. marker .. ' belongs to another library of '
                             .. 'the same name')
  end
  for i, name in ipairs({'count', 'level', 'split'}) do
    if found[i + 1] and not tonumber(found[i + 1]) then
      return redis.error_reply('URLSEEN-DAMAGED Redis key ' .. marker .. ': field ' .. name
                               .. ' is not a number')
    end
  end
  count[g], level[g], split[g] = tonumber(found[2] or 0), tonumber(found[3] or 0),
                                 tonumber(found[4] or 0)
  local want = expect[g] or '0'
  if tonumber(found[5] or '0') == tonumber(want) + 1 then resent = true end
  local went_back = mark_advance(marker, owner, want)
  if went_back then return redis.error_reply(went_back) end
end

local claims_keys = {}
local function claims_of(g)
  local key = claims_keys[g]
  if not key then
    key = prefix .. g .. '}:c'
    claims_keys[g] = key
  end
  return key
end
local function fps_of(g)
  local list = {}
  for j, i in ipairs(members[g]) do list[j] = sub(data, 16 * i - 15, 16 * i) end
  return list
end

local out = {}
if mode == 'ack' or mode == 'abandon' or mode == 'renew' then
  local claims = claims_context(owner, ARGV[10], ARGV[11], ARGV[12])
  for _, g in ipairs(touched) do
    local answers = claims_release(claims, claims_of(g), fps_of(g), mode)
    for j, i in ipairs(members[g]) do out[i] = answers[j] end
  end
  return table.concat(out)
end

local claims, none = nil, {}
if mode == 'claim' then
  claims = claims_context(owner, ARGV[10], ARGV[11], ARGV[12])
  for _, g in ipairs(touched) do
    local key = claims_of(g)
    claims_lookup(claims, key, #members[g], function() return fps_of(g) end)
    none[g] = claims_none(claims, key)
  end
end

-- The bucket of a fingerprint (linear hashing, above), its key cached.
local bucket_keys = {}
local function bucket_key(g, b)
  local cached = bucket_keys[g]
  if not cached then
    cached = {}
    bucket_keys[g] = cached
  end
  local key = cached[b]
  if not key then
    key = prefix .. g .. '}:f:' .. b
    cached[b] = key
  end
  return key
end
local function bucket_of(g, fp)
  local b1, b2, b3, b4 = byte(fp, 5, 8)
  local h = ((b1 * 256 + b2) * 256 + b3) * 256 + b4
  local span = 2 ^ level[g]
  local b = h % span
  if b < split[g] then b = h % (2 * span) end
  return b
end

local writes, w = {}, 0 -- group, field, value (false: delete) of each record written
local pending = {} -- fingerprint -> where its value is in writes (read back by a repeat)
local dropped = {} -- per group: fingerprints whose claim goes
local function write(g, fp, value)
  local at = pending[fp]
  if at then
    writes[at] = value
    return
  end
  w = w + 3
  writes[w - 2], writes[w - 1], writes[w] = g, fp, value
  pending[fp] = w
end
for i = 1, n do
  local g, pos = group_at[i], 16 * i - 15
  local fp = sub(data, pos, pos + 15)
  local value
  local at = pending[fp]
  if at then
    value = writes[at]
  else
    value = redis.call('HGET', bucket_key(g, bucket_of(g, fp)), fp)
  end
  local answer = SEEN
  if mode == 'claim' then
    if value then
      if not none[g] or resent then answer = claim_present(claims, claims_of(g), fp) end
      if answer ~= PENDING and not resent then
        local refs, first, last = unpack('<I4I4I4', value)
        if refs < MAXREFS then refs = refs + 1 end
        if now > last then last = now end
        write(g, fp, pack('<I4I4I4', refs, first, last))
      end
    else
      claims_queue(claims, claims_of(g), fp)
      write(g, fp, pack('<I4I4I4', 1, now, now))
      answer = NEW
    end
  elseif value then
    answer = NEW
    local refs = 0
    if mode == 'release' then
      local first, last
      refs, first, last = unpack('<I4I4I4', value)
      refs = refs - 1
      if refs > 0 then write(g, fp, pack('<I4I4I4', refs, first, last)) end
    end
    if refs <= 0 and mode ~= 'contains' then
      write(g, fp, false)
      local d = dropped[g]
      if not d then
        d = {}
        dropped[g] = d
      end
      d[#d + 1] = fp
    end
  end
  out[i] = answer
end

-- Claims before the records they cover: a script stopped part way leaves claims without
-- records (harmless), never a record answered new without its claim.
if claims then claims_write(claims) end

-- Split the group's next bucket (linear hashing, above): its records whose bit `level` of h
-- is set move to bucket split + 2^level.
local function split_bucket(g)
  local span = 2 ^ level[g]
  local old = bucket_key(g, split[g])
  local all = redis.call('HGETALL', old)
  local moved, names = {}, {}
  for j = 1, #all, 2 do
    local b1, b2, b3, b4 = byte(all[j], 5, 8)
    if floor((((b1 * 256 + b2) * 256 + b3) * 256 + b4) / span) % 2 == 1 then
      moved[#moved + 1] = all[j]
      moved[#moved + 1] = all[j + 1]
      names[#names + 1] = all[j]
    end
  end
  if #names > 0 then
    claims_each('HSET', bucket_key(g, split[g] + span), moved)
    claims_each('HDEL', old, names)
  end
  split[g] = split[g] + 1
  if split[g] == span then level[g], split[g] = level[g] + 1, 0 end
end

-- The records, in order, each group split as it grows past per_bucket records per bucket
-- (so no bucket outgrows its compact encoding within a large batch).
local total, moved = {}, {}
for _, g in ipairs(touched) do total[g] = count[g] end
for j = 1, w, 3 do
  local g, fp, value = writes[j], writes[j + 1], writes[j + 2]
  local key = bucket_key(g, bucket_of(g, fp))
  if value then
    if redis.call('HSET', key, fp, value) == 1 then
      total[g] = total[g] + 1
      while total[g] > per_bucket * (2 ^ level[g] + split[g]) do
        split_bucket(g)
        moved[g] = true
      end
    end
  elseif redis.call('HDEL', key, fp) == 1 then
    total[g] = total[g] - 1
  end
end
for g, list in pairs(dropped) do claims_each('HDEL', claims_of(g), list) end
for _, g in ipairs(touched) do
  local marker = prefix .. g .. '}:n'
  if total[g] ~= count[g] then redis.call('HINCRBY', marker, 'count', total[g] - count[g]) end
  if moved[g] then redis.call('HSET', marker, 'level', level[g], 'split', split[g]) end
end
local answer = table.concat(out)
if receipts and ttl > 0 then redis.call('SET', receipt_key, answer, 'EX', ttl) end
return answer
