-- library_batch.lua: one batch of fingerprints against urlseen's Redis fingerprint library
-- (RedisLibrary), in one atomic step.
--
-- Records live in bucket hashes: bucket b = the top ARGV[5] bits of the fingerprint, group
-- g = b % ARGV[4]; key ARGV[3] .. g .. "}:f:" .. b (the group is the hash tag, so a Redis
-- Cluster spreads groups over its slots and one call touches one group's slot). The hash field
-- is the fingerprint minus the whole bytes the bucket number already holds; the value is 12
-- bytes, little-endian: refs, first_seen, last_seen (u32 each, Unix seconds).
-- Each group counts its records in ARGV[3] .. g .. "}:n" (field "count").
--
-- KEYS[1]: this batch's receipt (same slot as the groups touched): the answer of a writing
--          batch is kept there ARGV[7] seconds, so a batch resent after a lost reply gets the
--          same answer (a URL reported new is never reported seen because the reply was lost)
-- ARGV[1]: mode: "claim" (insert if absent, else one more reference), "contains" (read only),
--          "release" (one reference less; the record goes at zero), "forget" (remove)
-- ARGV[2]: the fingerprints, 16 bytes each, concatenated
-- ARGV[6]: now, Unix seconds
-- Returns one character per fingerprint: "1" claim: new / others: was present; "0" otherwise.
local mode = ARGV[1]
local writes = mode ~= 'contains'
if writes then
  local done = redis.call('GET', KEYS[1])
  if done then return done end
end

local data, prefix, groups = ARGV[2], ARGV[3], tonumber(ARGV[4])
local bits, now, ttl = tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])
local byte, sub, floor = string.byte, string.sub, math.floor
local pack, unpack = struct.pack, struct.unpack
local scale = 2 ^ (32 - bits)
local drop = floor(bits / 8)
local MAXREFS = 4294967295

local out, counts = {}, {}
for pos = 1, #data, 16 do
  local b1, b2, b3, b4 = byte(data, pos, pos + 3)
  local bucket = floor((((b1 * 256 + b2) * 256 + b3) * 256 + b4) / scale)
  local g = bucket % groups
  local key = prefix .. g .. '}:f:' .. bucket
  local field = sub(data, pos + drop, pos + 15)
  local value = redis.call('HGET', key, field)
  local answer = '0'
  if mode == 'claim' then
    if value then
      local refs, first, last = unpack('<I4I4I4', value)
      if refs < MAXREFS then refs = refs + 1 end
      if now > last then last = now end
      redis.call('HSET', key, field, pack('<I4I4I4', refs, first, last))
    else
      redis.call('HSET', key, field, pack('<I4I4I4', 1, now, now))
      counts[g] = (counts[g] or 0) + 1
      answer = '1'
    end
  elseif value then
    answer = '1'
    local refs = 0
    if mode == 'release' then
      local first, last
      refs, first, last = unpack('<I4I4I4', value)
      refs = refs - 1
      if refs > 0 then redis.call('HSET', key, field, pack('<I4I4I4', refs, first, last)) end
    end
    if refs <= 0 and writes then
      redis.call('HDEL', key, field)
      counts[g] = (counts[g] or 0) - 1
    end
  end
  out[#out + 1] = answer
end

for g, delta in pairs(counts) do
  if delta ~= 0 then redis.call('HINCRBY', prefix .. g .. '}:n', 'count', delta) end
end
local answer = table.concat(out)
if writes and ttl > 0 then redis.call('SET', KEYS[1], answer, 'EX', ttl) end
return answer
