-- batch_claims.lua: the claims side of urlseen's Bloom batch scripts (bloom_batch.lua,
-- leaf_batch.lua), put after claims.lua and bits.lua: a batch's answers from its bits and
-- claims, and the release and deletion of a caller's claims.

local RECORD_FIND_MAX = 64 -- keys looked for in records by string.find, above: by a table

-- The claims that the records of `records` (claims_record) hold for the fingerprints of
-- `list`, read in place: fingerprint -> claim. Few keys are searched for in each record's
-- packed fingerprints (string.find, in C), more through a table of the wanted ones.
local function batch_recorded(records, width, list)
  local all, found = redis.call('HGETALL', records), {}
  local find, sub = string.find, string.sub
  local wanted = nil
  if #list > RECORD_FIND_MAX then
    wanted = {}
    for _, fp in ipairs(list) do wanted[fp] = true end
  end
  for i = 2, #all, 2 do
    local value = all[i]
    local cut = find(value, '\n', 1, true)
    local claim = sub(value, 1, cut - 1)
    if wanted then
      for s = cut + 1, #value, width do
        local fp = sub(value, s, s + width - 1)
        if wanted[fp] then found[fp] = claim end
      end
    else
      for _, fp in ipairs(list) do
        local at = cut + 1
        while true do
          local s = find(value, fp, at, true)
          if not s then break end
          if (s - cut - 1) % width == 0 then
            found[fp] = claim
            break
          end
          at = s + 1
        end
      end
    end
  end
  return found
end

-- The answers of an ADD whose bits said which keys are new (new[i]; or the answer string of a
-- batch of new keys): a key found present is answered by its claim (claims.lua), a new one is
-- claimed, with the call's other new keys, in one record of `records` (claims_record; per key
-- when the record exists already). The claims are written before the data they cover, so the
-- caller writes the bits after this returns. `fps`: the keys' fingerprints, `width` bytes each.
-- Records are read in place, not expanded (their clients then acknowledge them by deleting
-- them whole), unless a key of one is taken over: then they are expanded first, so that the
-- taker's claim is written over the one expanded from the record. A record's claim of a key
-- outranks a per-key claim of it (one left by a call that failed before its bits were set).
local function batch_answers(claims, key, records, fps, width, n, new, fresh)
  local function fp_at(i) return sub(fps, width * (i - 1) + 1, width * i) end
  if type(new) == 'string' then
    if not claims_record(claims, records, fps) then
      local q = claims_queued(claims, key)
      for i = 1, n do claim_new_into(claims, q, fp_at(i), false) end
      new = string.rep(OWN, n)
    end
    claims_write(claims)
    return new
  end
  local function present()
    local list = {}
    for i = 1, n do
      if not new[i] then list[#list + 1] = fp_at(i) end
    end
    return list
  end
  claims_lookup(claims, key, n - fresh, present)
  local recorded = fresh < n and batch_recorded(records, width, present()) or {}
  if next(recorded) then
    local known = claims.known[key]
    for fp, claim in pairs(recorded) do known[fp] = claim end
    claims.some = claims.some or {}
    claims.some[key] = true
  end
  local none = claims_none(claims, key)
  local out, kept, at = {}, {}, {} -- kept: this call's new keys, claimed in one record
  for i = 1, n do
    if new[i] then
      local fp = fp_at(i)
      kept[#kept + 1] = fp
      at[#at + 1] = i
      if not none then claims.fresh[fp] = true end
      out[i] = NEW
    elseif none then
      out[i] = SEEN
    else
      out[i] = claim_present(claims, key, fp_at(i))
      if out[i] == NEW then out[i] = OWN end
    end
  end
  local taken = claims.queued[key] -- takeovers, claimed per key
  if taken and #taken > 0 and next(recorded) then claims_expand(records, key, width) end
  if #kept > 0 and not claims_record(claims, records, table.concat(kept)) then
    local q = claims_queued(claims, key)
    for j, fp in ipairs(kept) do
      claim_new_into(claims, q, fp, false)
      out[at[j]] = OWN
    end
  end
  claims_write(claims)
  return table.concat(out)
end

-- The answers of an operation without claims (CONTAINS: NEW absent, SEEN present; COPY).
local function batch_plain_answers(n, new)
  local out = {}
  for i = 1, n do out[i] = new[i] and NEW or SEEN end
  return table.concat(out)
end

-- The fingerprints packed in `fps`, `width` bytes each, as a list.
local function batch_split(fps, width)
  local list = {}
  for i = 1, #fps / width do list[i] = sub(fps, width * (i - 1) + 1, width * i) end
  return list
end

-- Release (RELEASE_HOW[op]) the caller's claims of the fingerprints `fps` (`width` bytes
-- each), records expanded first: per key NEW if the claim was still the caller's, else SEEN.
local function batch_release(claims, key, records, fps, width, how)
  claims_expand(records, key, width)
  return table.concat(claims_release(claims, key, batch_split(fps, width), how))
end

-- Delete unread the claims of `list`'s fingerprints (from index `from`) in `key`: how many were.
local function batch_drop_each(key, list, from)
  local deleted = 0
  for s = from, #list, UNPACK_MAX do
    deleted = deleted + redis.call('HDEL', key, unpack(list, s, math.min(s + UNPACK_MAX - 1,
                                                                       #list)))
  end
  return deleted
end
