-- library_batch.lua: one batch of fingerprints against urlseen's Redis fingerprint library
-- (RedisLibrary), in one atomic step; claim mode also claims each fingerprint answered new
-- (claims.lua, mark.lua and library_buckets.lua, put in front).
--
-- KEYS: receipt
-- ARGV: mode fps prefix groups per_bucket now receipt_ttl instance
--       owner priority call lease_ms marks extra
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
-- Claims (claims.lua) are written before the records they cover and deleted on
-- acknowledgement. The URLs a call answers new in a group are claimed together, in one field
-- of the group's hash prefix .. g .. "}:r" (claims_record: field "OWNER CALL", value the
-- claim, a newline and the fingerprints), which the acknowledgement deletes (a native HDEL
-- by the client): O(1) commands per call, and a client that acknowledges each batch leaves
-- nothing behind. Whatever looks claims up or changes them one by one first expands those
-- records into per-key claims, in the group's hash prefix .. g .. "}:c" (field = the
-- fingerprint): a claim call (before its look-ups), a release, forget, ack, abandon or renew.
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
-- (mark.lua: a group that went back in time answers "URLSEEN-ROLLBACK ..."); extra: a
-- claim's further sightings of each fingerprint, a byte each (0-255), or "" (none).
-- Returns one character per fingerprint: claim: NEW, OWN (new, claimed per key, not in the
-- call's record), SEEN or PENDING (claims.lua); contains, release, forget: NEW was present; ack, abandon, renew: NEW the claim was still
-- the caller's. A group whose data vanished is an error reply "URLSEEN-LOST ...", before
-- anything is written.
local mode, data, prefix, groups = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local per_bucket, now, ttl, instance = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]),
                                       ARGV[8]
local owner = ARGV[9]
local receipt_key = KEYS[1]
local extra = ARGV[14]
local receipts = mode == 'release' or mode == 'forget'
if receipts then
  local done = redis.call('GET', receipt_key)
  if done then return done end
end

local byte, sub = string.byte, string.sub
local pack, unpack = struct.pack, struct.unpack
local OWN = 'T'
local n = #data / 16

-- Each fingerprint's group and hash h (bytes 5-8), and each group's positions in order.
local group_at, hash_at, members, touched = {}, {}, {}, {}
for i = 1, n do
  local b1, b2, b3, b4, b5, b6, b7, b8 = byte(data, 16 * i - 15, 16 * i - 8)
  local g = (((b1 * 256 + b2) * 256 + b3) * 256 + b4) % groups
  group_at[i], hash_at[i] = g, ((b5 * 256 + b6) * 256 + b7) * 256 + b8
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

local function claims_of(g) return prefix .. g .. '}:c' end
local function records_of(g) return prefix .. g .. '}:r' end
local function fps_of(list)
  local fps = {}
  for j, i in ipairs(list) do fps[j] = sub(data, 16 * i - 15, 16 * i) end
  return fps
end

local out = {}
local claims
if mode ~= 'contains' then claims = claims_context(owner, ARGV[10], ARGV[11], ARGV[12]) end

if mode == 'ack' or mode == 'abandon' or mode == 'renew' then
  for _, g in ipairs(touched) do
    local list = members[g]
    claims_expand(records_of(g), claims_of(g), 16) -- the client deletes intact ones itself
    local answers = claims_release(claims, claims_of(g), fps_of(list), mode)
    for j, i in ipairs(list) do out[i] = answers[j] end
  end
  return table.concat(out)
end

-- Claims looked up (claim) or deleted (release, forget) one by one: records expanded first.
local none = {}
if mode ~= 'contains' then
  for _, g in ipairs(touched) do
    local key = claims_of(g)
    claims_expand(records_of(g), key, 16)
    if mode == 'claim' then
      claims_lookup(claims, key, #members[g], function() return fps_of(members[g]) end)
      none[g] = claims_none(claims, key)
    end
  end
end

local buckets = {}
for _, g in ipairs(touched) do
  buckets[g] = buckets_of(prefix .. g .. '}:f:', level[g], split[g])
end

local function append(lists, g, item) -- lists[g], made if needed, gets item
  local list = lists[g]
  if not list then
    list = {}
    lists[g] = list
  end
  list[#list + 1] = item
end
local fresh = pack('<I4I4I4', 1, now, now)
local inserted = {} -- fingerprint -> its references, for the records this call inserts
local met_at, met_list = {}, {} -- a present URL's first answer, and the references it gains
local adds, dropped, total = {}, {}, {} -- per group: positions inserted; claims to drop; count
for _, g in ipairs(touched) do total[g] = count[g] end
for i = 1, n do
  local g, pos = group_at[i], 16 * i - 15
  local key = bucket_key(buckets[g], hash_at[i])
  local fp = sub(data, pos, pos + 15)
  local answer = SEEN
  local refs, met = inserted[fp], met_at[fp]
  local more = extra ~= '' and byte(extra, i) or 0
  if refs then
    inserted[fp] = refs + 1 + more -- a repeat of a URL this call inserts: seen
  elseif met then -- a repeat of a present URL this call asked about: asked once
    answer = met.answer
    if answer == NEW or answer == OWN then answer = SEEN end -- the first had it new
    if answer ~= PENDING and not resent then met.refs = met.refs + 1 + more end
  else
    local value = redis.call('HGET', key, fp)
    if mode == 'claim' then
      if value then
        if not none[g] or resent then
          answer = claim_present(claims, claims_of(g), fp)
          if answer == NEW then answer = OWN end -- taken over, or this very call's: per key
        end
        met = {answer = answer, key = key, fp = fp, value = value, refs = 0}
        if answer ~= PENDING and not resent then met.refs = 1 + more end
        met_at[fp] = met
        met_list[#met_list + 1] = met
      else
        inserted[fp] = 1 + more
        append(adds, g, i)
        answer = NEW
      end
    elseif value then
      answer = NEW
      local r = 0
      if mode == 'release' then
        local first, last
        r, first, last = unpack('<I4I4I4', value)
        r = r - 1
        if r > 0 then redis.call('HSET', key, fp, pack('<I4I4I4', r, first, last)) end
      end
      if r <= 0 and mode ~= 'contains' then
        redis.call('HDEL', key, fp)
        total[g] = total[g] - 1
        append(dropped, g, fp)
      end
    end
  end
  out[i] = answer
end
for g, list in pairs(dropped) do claims_each('HDEL', claims_of(g), list) end
records_bump(met_list, now)

-- The new URLs: their claims first (one record per group, or per key where this call's
-- record exists already: a resent call's URLs forgotten meanwhile), then their records, in
-- order, each group split as it grows past per_bucket records per bucket (so that no bucket
-- outgrows its compact encoding within a large batch).
for _, g in ipairs(touched) do
  local a = adds[g]
  if a and not claims_record(claims, records_of(g), table.concat(fps_of(a))) then
    local q = claims_queued(claims, claims_of(g))
    for _, i in ipairs(a) do
      claim_new_into(claims, q, sub(data, 16 * i - 15, 16 * i), false)
      out[i] = OWN
    end
  end
end
if claims then claims_write(claims) end
for _, g in ipairs(touched) do
  local b = buckets[g]
  local limit = buckets_room(b, per_bucket)
  for _, i in ipairs(adds[g] or {}) do
    local fp = sub(data, 16 * i - 15, 16 * i)
    local refs = inserted[fp]
    local value = refs == 1 and fresh or pack('<I4I4I4', refs, now, now)
    if redis.call('HSET', bucket_key(b, hash_at[i]), fp, value) == 1 then
      total[g] = total[g] + 1
      while total[g] > limit do
        bucket_split(b)
        limit = buckets_room(b, per_bucket)
      end
    end
  end
  local marker = prefix .. g .. '}:n'
  if total[g] ~= count[g] then redis.call('HINCRBY', marker, 'count', total[g] - count[g]) end
  if b.moved then redis.call('HSET', marker, 'level', b.level, 'split', b.split) end
end
local answer = table.concat(out)
if receipts and ttl > 0 then redis.call('SET', receipt_key, answer, 'EX', ttl) end
return answer
