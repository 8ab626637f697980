-- library_batch.lua: one batch of fingerprints against urlseen's Redis fingerprint library
-- (RedisLibrary), in one atomic step; claim mode also claims each fingerprint answered new
-- (claims.lua, mark.lua and library_buckets.lua, put in front).
--
-- KEYS: receipt
-- ARGV: mode fps prefix groups per_bucket now receipt_ttl instance
--       owner priority call lease_ms marks extra
-- (urlseen.shared.scripts.LIBRARY_BATCH builds them)
--
-- Layout (library_buckets.lua): group g = the fingerprint's first 4 bytes (big-endian) mod
-- groups, the hash tag (a Redis Cluster spreads groups over its slots). A group's records are
-- fields of bucket hashes prefix .. g .. "}:f:" .. b grown by linear hashing (level L, split
-- s; h = bytes 5-8, b = h mod 2^L, or h mod 2^(L+1) where that is below s): field the whole
-- fingerprint, value 12 bytes little-endian: refs, first_seen, last_seen (u32, Unix seconds).
-- A call's new URLs in a group are claimed by one record (claims.lua, claims_record) in
-- prefix .. g .. "}:r", which the client's acknowledgement deletes (a native HDEL); whatever
-- looks claims up or changes them one by one first expands those records into per-key claims
-- in prefix .. g .. "}:c". prefix .. g .. "}:n" holds the group's "count", "level", "split",
-- "instance" (the library's random id) and the clients' write marks.
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
-- call's record), SEEN or PENDING (claims.lua); contains, release, forget: NEW was present;
-- ack, abandon, renew: NEW the claim was still the caller's. A group whose data vanished is
-- an error reply "URLSEEN-LOST ...", before anything is written.
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

local hash_at, seg_start, seg_end, segments_of, sizes, touched = buckets_segments(data, n, groups)
table.sort(touched)

local expect = {}
for g, mark in string.gmatch(ARGV[13], '(%d+):(%d+)') do expect[tonumber(g)] = {g, mark} end
local level, split, count, head, resent = groups_open(touched, prefix, instance, owner, expect)
if not level then return redis.error_reply(split) end

local function claims_of(g) return head[g] .. ':c' end
local function records_of(g) return head[g] .. ':r' end
local function positions_of(g) return buckets_positions(segments_of[g], seg_start, seg_end) end
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
-- and flat arrays (Lua 5.1 interprets every step: benchmarks/redis/REPORT.md, "The exact
-- library's server CPU"). A claim or contains reads each run of consecutive fingerprints of
-- one bucket with one HMGET (the client sends a group's fingerprints in bucket order:
-- library.py, bucket_order).
local buckets, adds, total = {}, {}, {}
local more_at = extra ~= '' and extra or nil
-- claim: a fingerprint met before in this call -> its index in its group's adds (> 0), or
-- minus its index in the present ones (met_*: key, fingerprint, value read, first answer and
-- the references it gains)
local first, met_key, met_fp, met_value, met_answer, met_refs, met = {}, {}, {}, {}, {}, {}, 0
local run, dropped, batched = {}, {}, mode == 'claim' or mode == 'contains'
for _, g in ipairs(touched) do
  local b = buckets_of(head[g] .. ':f:', level[g], split[g])
  buckets[g], total[g] = b, count[g]
  local keys, span, cut = b.keys, b.span, b.split
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
      local key = keys[bucket] or bucket_name(b, bucket)
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

records_bump(met_key, met_fp, met_value, met_refs, met, now)

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
for _, g in ipairs(touched) do
  local b, a = buckets[g], adds[g]
  if a then total[g] = total[g] + buckets_insert(b, count[g], per_bucket, a, hash_at, now) end
  local marker = head[g] .. ':n'
  if total[g] ~= count[g] then call('HINCRBY', marker, 'count', total[g] - count[g]) end
  if b.moved then call('HSET', marker, 'level', b.level, 'split', b.split) end
end
local answer = table.concat(out)
if receipts and ttl > 0 then call('SET', receipt_key, answer, 'EX', ttl) end
return answer
