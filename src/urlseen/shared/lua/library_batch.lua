-- library_batch.lua: one batch of fingerprints against urlseen's Redis fingerprint library
-- (RedisLibrary), in one atomic step; claim mode also claims each fingerprint answered new
-- (claims.lua, put in front).
--
-- KEYS: receipt
-- ARGV: mode fps prefix groups bucket_bits now receipt_ttl instance
--       owner priority call lease_ms marks
-- (urlseen.shared.scripts.LIBRARY_BATCH builds them)
--
-- Records live in bucket hashes: bucket b = the top bucket_bits bits of the fingerprint,
-- group g = b % groups; key prefix .. g .. "}:f:" .. b (the group is the hash tag, so a Redis
-- Cluster spreads groups over its slots and one call touches one group's slot). The hash field
-- is the fingerprint minus the whole bytes the bucket number already holds; the value is 12
-- bytes, little-endian: refs, first_seen, last_seen (u32 each, Unix seconds), followed, while
-- the record is claimed, by its claim (claims.lua's owner, priority, call id and deadline:
-- the owner's 16 characters, then the three numbers as little-endian doubles, exact below
-- 2^53: 40 bytes whatever the numbers, so a claimed record, 52 bytes, stays within Redis's
-- hash-max-listpack-value, 64). A claim is written with the record it covers, in the same
-- HSET, so it is never missing from data it covers, and a URL found present has its claim in
-- the value already read.
-- Each group has a hash prefix .. g .. "}:n" (fields "count": its records, "claims": its
-- records holding a claim, "instance": the library's random id, written when the library
-- was made).
--
-- receipt: this batch's receipt (same slot as the groups touched): the answer of a claim,
--          release or forget is kept there receipt_ttl seconds, so a batch resent after a lost
--          reply gets the same answer and changes nothing twice (should the receipt be gone, a
--          resent claim still answers its new fingerprints new: claims.lua)
-- mode: "claim" (insert if absent, else one more reference), "contains" (read only),
--       "release" (one reference less; the record goes at zero), "forget" (remove), "ack",
--       "abandon", "renew" (delete, end the lease of, or start a new lease of the caller's
--       claims: claims.lua)
-- fps: the fingerprints, 16 bytes each, concatenated; now: Unix seconds; instance: the
-- instance the client opened; owner, priority, call, lease_ms: the claims' (claims.lua);
-- marks: "g:n ..." the caller's write mark in each group it touches, as it expects it
-- (mark.lua, put in front: a group that went back in time answers "URLSEEN-ROLLBACK ...")
-- Returns one character per fingerprint: claim: NEW, SEEN or PENDING (claims.lua); contains,
-- release, forget: NEW was present, SEEN not; ack, abandon, renew: NEW the claim was still
-- the caller's. A group whose data vanished is an error reply "URLSEEN-LOST ...", before
-- anything is written.
local mode, data, prefix, groups = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4])
local bits, now, ttl, instance = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7]), ARGV[8]
local receipt_key = KEYS[1]
local receipts = mode == 'claim' or mode == 'release' or mode == 'forget'
if receipts then
  local done = redis.call('GET', receipt_key)
  if done then return done end
end

local byte, sub, floor = string.byte, string.sub, math.floor
local pack, unpack = struct.pack, struct.unpack
local scale = 2 ^ (32 - bits)
local drop = floor(bits / 8)
local MAXREFS = 4294967295

local function group_of(pos)
  local b1, b2, b3, b4 = byte(data, pos, pos + 3)
  local bucket = floor((((b1 * 256 + b2) * 256 + b3) * 256 + b4) / scale)
  return bucket % groups, bucket
end

local checked, expect = {}, {}
for g, n in string.gmatch(ARGV[13], '(%d+):(%d+)') do expect[tonumber(g)] = n end
for pos = 1, #data, 16 do
  local g = group_of(pos)
  if not checked[g] then
    checked[g] = true
    local marker = prefix .. g .. '}:n'
    local found = redis.call('HMGET', marker, 'instance', 'count', 'claims')
    if found[1] ~= instance then
      if not found[1] then
        return redis.error_reply('URLSEEN-LOST ' .. marker .. ' is gone')
      end
      return redis.error_reply('URLSEEN-LOST ' .. marker .. ' belongs to another library of '
                               .. 'the same name')
    end
    for i, name in ipairs({'count', 'claims'}) do
      if found[i + 1] and not tonumber(found[i + 1]) then
        return redis.error_reply('URLSEEN-DAMAGED Redis key ' .. marker .. ': field ' .. name
                                 .. ' is not a number')
      end
    end
    local went_back = mark_advance(marker, ARGV[9], expect[g] or '0')
    if went_back then return redis.error_reply(went_back) end
  end
end

local claims
local releasing = mode == 'ack' or mode == 'abandon' or mode == 'renew'
if mode == 'claim' or releasing then
  claims = claims_context(ARGV[9], ARGV[10], ARGV[11], ARGV[12])
end

local mine
if claims then
  if #claims.owner ~= 16 then return redis.error_reply('library_batch.lua: owner not 16 long') end
  mine = claims.owner .. pack('<ddd', claims.prio, tonumber(claims.call), claims.deadline)
end
local function claim_fields(claim)
  if not claim then return nil end
  local prio, call, deadline = unpack('<ddd', claim, 17)
  return sub(claim, 1, 16), prio, call, deadline
end

local out, counts, held = {}, {}, {} -- held[g]: change of the group's claimed records
local function add(t, g, d) t[g] = (t[g] or 0) + d end

for pos = 1, #data, 16 do
  local g, bucket = group_of(pos)
  local key = prefix .. g .. '}:f:' .. bucket
  local field = sub(data, pos + drop, pos + 15)
  local value = redis.call('HGET', key, field)
  local record, claim = value, nil
  if value and #value > 12 then record, claim = sub(value, 1, 12), sub(value, 13) end
  local answer = SEEN
  if releasing then
    if claim and sub(claim, 1, 16) == claims.owner then
      answer = NEW
      if mode == 'ack' then
        redis.call('HSET', key, field, record)
        add(held, g, -1)
      else
        local deadline = mode == 'renew' and claims.deadline or 0
        redis.call('HSET', key, field, record .. sub(claim, 1, 32) .. pack('<d', deadline))
      end
    end
  elseif mode == 'claim' then
    local fp = sub(data, pos, pos + 15)
    if value then
      if claims.fresh[fp] then
        answer = SEEN -- answered new earlier in this call: a repeat
      else
        local takeover
        answer, takeover = claim_answer(claims, claim_fields(claim))
        if takeover then claim = mine end
        if answer == NEW then claims.fresh[fp] = true end
      end
      if answer ~= PENDING then
        local refs, first, last = unpack('<I4I4I4', record)
        if refs < MAXREFS then refs = refs + 1 end
        if now > last then last = now end
        redis.call('HSET', key, field, pack('<I4I4I4', refs, first, last) .. (claim or ''))
      end
    else
      redis.call('HSET', key, field, pack('<I4I4I4', 1, now, now) .. mine)
      claims.fresh[fp] = true
      add(counts, g, 1)
      add(held, g, 1)
      answer = NEW
    end
  elseif value then
    answer = NEW
    local refs = 0
    if mode == 'release' then
      local first, last
      refs, first, last = unpack('<I4I4I4', record)
      refs = refs - 1
      if refs > 0 then
        redis.call('HSET', key, field, pack('<I4I4I4', refs, first, last) .. (claim or ''))
      end
    end
    if refs <= 0 and mode ~= 'contains' then
      redis.call('HDEL', key, field)
      add(counts, g, -1)
      if claim then add(held, g, -1) end
    end
  end
  out[#out + 1] = answer
end

for g, delta in pairs(counts) do
  if delta ~= 0 then redis.call('HINCRBY', prefix .. g .. '}:n', 'count', delta) end
end
for g, delta in pairs(held) do
  if delta ~= 0 then redis.call('HINCRBY', prefix .. g .. '}:n', 'claims', delta) end
end
local answer = table.concat(out)
if receipts and ttl > 0 then redis.call('SET', receipt_key, answer, 'EX', ttl) end
return answer
