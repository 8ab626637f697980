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

local byte, sub, call = string.byte, string.sub, redis.call
local pack, unpack_record = struct.pack, struct.unpack
local OWN = 'T'
local n = #data / 16

-- Each fingerprint's hash h (bytes 5-8), and the call's segments: runs of consecutive
-- positions of one group (a claim's or contains' client sends its fingerprints sorted by
-- group: library.py, bucket_order), each group's in order (segments_of), and its size.
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
-- A group's positions in order.
local function positions_of(g)
  local list = {}
  for _, k in ipairs(segments_of[g]) do
    for i = seg_start[k], seg_end[k] do list[#list + 1] = i end
  end
  return list
end
table.sort(touched)

local expect = {}
for g, mark in string.gmatch(ARGV[13], '(%d+):(%d+)') do expect[tonumber(g)] = mark end
local level, split, count, resent = {}, {}, {}, false
for _, g in ipairs(touched) do
  local marker = prefix .. g .. '}:n'
  local found = call('HMGET', marker, 'instance', 'count', 'level', 'split', 'w:' .. owner)
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
    local list = positions_of(g)
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
      claims_lookup(claims, key, sizes[g], function() return fps_of(positions_of(g)) end)
      none[g] = claims_none(claims, key)
    end
  end
end

-- Each fingerprint looked up in its bucket, group by group (a fingerprint's repeats are in
-- its group, in order). The loops below run once per URL: they keep their state in locals
-- and flat arrays (Lua 5.1 interprets every step; benchmarks/redis/REPORT.md, round 3). A
-- claim or contains reads each run of consecutive fingerprints of one bucket with one HMGET
-- (the client sends a group's fingerprints in bucket order: library.py, bucket_order).
local RUN_MAX = 1000 -- fingerprints per HMGET or HSET
local buckets, adds, total = {}, {}, {}
local more_at = extra ~= '' and extra or nil
-- claim: a fingerprint met before in this call -> its index in its group's adds (> 0), or
-- minus its index in the present ones (met_*: key, fingerprint, value read, first answer and
-- the references it gains)
local first, met_key, met_fp, met_value, met_answer, met_refs, met = {}, {}, {}, {}, {}, {}, 0
local run, dropped, batched = {}, {}, mode == 'claim' or mode == 'contains'
for _, g in ipairs(touched) do
  local b = buckets_of(prefix .. g .. '}:f:', level[g], split[g])
  buckets[g], total[g] = b, count[g]
  local head, keys, span, cut = b.head, b.keys, b.span, b.split
  local span2, ckey = 2 * span, claims_of(g)
  local look = mode == 'claim' and (not none[g] or resent)
  local add_fp, add_refs, add_at, added = {}, {}, {}, 0
  for _, segment in ipairs(segments_of[g]) do
    local j, size, bucket = seg_start[segment], seg_end[segment], nil
    while j <= size do
      local i = j
      if not bucket then
        local h = hash_at[i]
        bucket = h % span
        if bucket < cut then bucket = h % span2 end
      end
      local key = keys[bucket]
      if not key then
        key = head .. bucket
        keys[bucket] = key
      end
      local e, next_bucket = j, nil
      run[1] = sub(data, 16 * i - 15, 16 * i)
      if batched then -- the run j..e of this bucket
        while e < size and e - j + 1 < RUN_MAX do
          local h = hash_at[e + 1]
          local b2 = h % span
          if b2 < cut then b2 = h % span2 end
          if b2 ~= bucket then
            next_bucket = b2
            break
          end
          e = e + 1
          run[e - j + 1] = sub(data, 16 * e - 15, 16 * e)
        end
      end
      local values, alone = false, false -- the run's values; a run of one: HGET, no table
      if e > j then
        values = call('HMGET', key, unpack(run, 1, e - j + 1))
      elseif batched then
        alone = call('HGET', key, run[1])
      end
      for k = j, e do
        i = k
        local fp = run[k - j + 1]
        if mode == 'claim' then
          local more = more_at and byte(more_at, i) or 0
          local seen = first[fp]
          local answer = SEEN
          if seen == nil then
            local value = values and values[k - j + 1] or alone
            if value then
              if look then
                answer = claim_present(claims, ckey, fp)
                if answer == NEW then answer = OWN end -- taken over, or this call's: per key
              end
              met = met + 1
              met_key[met], met_fp[met], met_value[met], met_answer[met] = key, fp, value,
                                                                           answer
              met_refs[met] = (answer ~= PENDING and not resent) and 1 + more or 0
              first[fp] = -met
            else
              added = added + 1
              add_fp[added], add_at[added] = fp, i
              if more > 0 then add_refs[added] = 1 + more end
              first[fp] = added
              answer = NEW
            end
          elseif seen > 0 then -- a repeat of a URL this call inserts: seen
            add_refs[seen] = (add_refs[seen] or 1) + 1 + more
          else -- a repeat of a present URL this call asked about: asked once
            answer = met_answer[-seen]
            if answer == NEW or answer == OWN then answer = SEEN end -- the first had it new
            if answer ~= PENDING and not resent then
              met_refs[-seen] = met_refs[-seen] + 1 + more
            end
          end
          out[i] = answer
        elseif mode == 'contains' then
          out[i] = (values and values[k - j + 1] or alone) and NEW or SEEN
        else -- one by one: a repeat sees the change of the one before
          local value = call('HGET', key, fp)
          out[i] = value and NEW or SEEN
          if value then
            local r, first_seen, last_seen = 0, 0, 0
            if mode == 'release' then
              r, first_seen, last_seen = unpack_record('<I4I4I4', value)
              r = r - 1
              if r > 0 then call('HSET', key, fp, pack('<I4I4I4', r, first_seen, last_seen)) end
            end
            if r <= 0 then
              call('HDEL', key, fp)
              total[g] = total[g] - 1
              dropped[#dropped + 1] = fp
            end
          end
        end
      end
      j, bucket = e + 1, next_bucket
    end
  end
  if added > 0 then adds[g] = {fp = add_fp, refs = add_refs, at = add_at, n = added} end
  if #dropped > 0 then
    claims_each('HDEL', ckey, dropped)
    dropped = {}
  end
end

-- A present record's sightings in this call: refs up (at most 2^32 - 1), last seen = now;
-- one HSET per run of one bucket.
local function flush(key, fields, size)
  if size > 0 then call('HSET', key, unpack(fields, 1, size)) end
  return 0
end
local fields, filled, last_key = {}, 0, nil
for k = 1, met do
  if met_refs[k] > 0 then
    local r, first_seen, last_seen = unpack_record('<I4I4I4', met_value[k])
    if now > last_seen then last_seen = now end
    r = math.min(r + met_refs[k], 4294967295)
    if met_key[k] ~= last_key or filled >= 2 * RUN_MAX then
      filled = flush(last_key, fields, filled)
      last_key = met_key[k]
    end
    fields[filled + 1], fields[filled + 2] = met_fp[k], pack('<I4I4I4', r, first_seen, last_seen)
    filled = filled + 2
  end
end
flush(last_key, fields, filled)

-- The new URLs: their claims first (one record per group, or per key where this call's
-- record exists already: a resent call's URLs forgotten meanwhile), then their records, each
-- group split first as far as its new count needs (so that no bucket outgrows its compact
-- encoding; the same buckets as splitting while inserting).
for _, g in ipairs(touched) do
  local a = adds[g]
  if a and not claims_record(claims, records_of(g), table.concat(a.fp)) then
    local q = claims_queued(claims, claims_of(g))
    for j = 1, a.n do
      claim_new_into(claims, q, a.fp[j], false)
      out[a.at[j]] = OWN
    end
  end
end
if claims then claims_write(claims) end
local fresh = pack('<I4I4I4', 1, now, now)
for _, g in ipairs(touched) do
  local b, a = buckets[g], adds[g]
  if a then
    while count[g] + a.n > buckets_room(b, per_bucket) do bucket_split(b) end
    local head, keys, span, cut, fps, at, refs = b.head, b.keys, b.span, b.split, a.fp, a.at,
                                                 a.refs
    local span2, added, last = 2 * span, 0, nil
    filled = 0
    for j = 1, a.n do
      local h, r = hash_at[at[j]], refs[j] or 1
      local bucket = h % span
      if bucket < cut then bucket = h % span2 end
      if bucket ~= last or filled >= 2 * RUN_MAX then
        if filled > 0 then added = added + call('HSET', keys[last], unpack(fields, 1, filled)) end
        filled, last = 0, bucket
        if not keys[bucket] then keys[bucket] = head .. bucket end
      end
      fields[filled + 1], fields[filled + 2] = fps[j], r == 1 and fresh or
                                                        pack('<I4I4I4', r, now, now)
      filled = filled + 2
    end
    if filled > 0 then added = added + call('HSET', keys[last], unpack(fields, 1, filled)) end
    total[g] = total[g] + added
  end
  local marker = prefix .. g .. '}:n'
  if total[g] ~= count[g] then call('HINCRBY', marker, 'count', total[g] - count[g]) end
  if b.moved then call('HSET', marker, 'level', b.level, 'split', b.split) end
end
local answer = table.concat(out)
if receipts and ttl > 0 then call('SET', receipt_key, answer, 'EX', ttl) end
return answer
