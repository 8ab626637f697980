-- claims.lua: the claims of urlseen's shared filters (urlseen.shared.claims), put in front
-- of each batch script that uses them (bloom_batch.lua, leaf_batch.lua, library_batch.lua).
--
-- A claim says "this URL was answered new to client OWNER, which has not acknowledged it yet".
-- It is a field of a hash in the slot of the URL's data (the Bloom filter's; the library keeps
-- it in the URL's record instead): field = the URL's fingerprint, value
-- = "OWNER PRIO CALL DEADLINE": the client's id, the priority of its batch (Unix ms by the
-- client's clock: the older the higher), the id of the script call that made the claim, and
-- the lease's end (Unix ms by this server's clock). Claims are written before the data they
-- cover, so a script stopped part way leaves claims without data (harmless), never data
-- without claims.
--
-- A URL whose data says "seen" is answered by its claim:
--   no claim, or the asker's own claim from an earlier call       -> '0' seen, even past its
--       lease: the asker's caller has the first answer (or gets it in this batch)
--   the asker's own claim from this very call (a resent call)     -> '1' new, as the first time
--   an abandoned claim (lease end 0), the asker's own included    -> '1' new: taken over (a
--       client abandons the claims of a call whose replies were all lost: nobody got them)
--   another client's claim whose lease ended                      -> '1' new: taken over
--   another client's live claim, older than the asker's batch     -> 'P' pending: ask again
--   another client's live claim, younger than the asker's batch   -> '0' seen (its claimer
--       delivers it, or its claim outlives it; never waiting on a younger claim means that
--       clients never wait on each other in a circle)

-- The functions below cost O(1) redis.calls per call of a script whatever its batch: a batch
-- looks up the claims it needs at once (claims_lookup), queues the claims it makes and writes
-- them together (claims_write, before the data they cover), and releases with one read and
-- one write (claims_release).

local UNPACK_MAX = 4000 -- values per unpack() (Lua's C stack holds ~8000)

-- The answers, one character per URL (urlseen.shared.scripts.Answer).
local NEW, SEEN, PENDING = '1', '0', 'P'

local function claims_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- owner, prio, call, lease_ms: this call's side (ARGV). The clock is read when a claim is first
-- judged or written (now, deadline, mine): a call of repeats that meets no claim reads none.
local function claims_context(owner, prio, call, lease_ms)
  local lazy = {__index = function(c, field)
    if field ~= 'now' and field ~= 'deadline' and field ~= 'mine' then return nil end
    c.now = claims_now()
    c.deadline = c.now + tonumber(lease_ms)
    c.mine = owner .. ' ' .. prio .. ' ' .. call .. ' ' .. c.deadline
    return c[field]
  end}
  return setmetatable({owner = owner, prio = tonumber(prio), call = call, tag = owner .. ' ',
                       fresh = {}, known = {}, queued = {}}, lazy)
end

-- redis.call(cmd, key, values...) in slices that unpack() can hold.
local function claims_each(cmd, key, values)
  for s = 1, #values, UNPACK_MAX do
    redis.call(cmd, key, unpack(values, s, math.min(s + UNPACK_MAX - 1, #values)))
  end
end

-- Read, in one step and before this call writes any, the claims of the URLs a batch found
-- present in its data: `wanted` of them, whose fingerprints (repeats allowed) list_of()
-- returns when they are needed. HGETALL when the hash holds no more claims than that, else
-- HMGET; nothing when it is empty (then claims_none: every present URL is seen).
local function claims_lookup(c, key, wanted, list_of)
  local known = {}
  c.known[key] = known
  local held = wanted > 0 and redis.call('HLEN', key) or 0
  if held == 0 then return end
  c.some = c.some or {}
  c.some[key] = true
  if held <= wanted then
    local all = redis.call('HGETALL', key)
    for i = 1, #all, 2 do known[all[i]] = all[i + 1] end
    return
  end
  local fps = list_of()
  for s = 1, #fps, UNPACK_MAX do
    local last = math.min(s + UNPACK_MAX - 1, #fps)
    local values = redis.call('HMGET', key, unpack(fps, s, last))
    for i = s, last do
      if values[i - s + 1] then known[fps[i]] = values[i - s + 1] end
    end
  end
end

-- Whether claims_lookup found no claim in `key`: then every URL present there is seen (a
-- repeat of one answered new in this call is seen too), without its fingerprint.
local function claims_none(c, key)
  return not (c.some and c.some[key])
end

local function claims_parse(value)
  if not value then return nil end
  local owner, prio, call, deadline = string.match(value, '^(%S+) (%d+) (%S+) (%d+)$')
  return owner, tonumber(prio), call, tonumber(deadline)
end

-- The list of (field, value) pairs queued for `key`'s HSET by claims_write.
local function claims_queued(c, key)
  local q = c.queued[key]
  if not q then
    q = {}
    c.queued[key] = q
  end
  return q
end

local function claims_queue(c, key, fp)
  local q = claims_queued(c, key)
  q[#q + 1] = fp
  q[#q + 1] = c.mine
  c.fresh[fp] = true
end

-- A URL absent from the data: this call answers it new and claims it (written by
-- claims_write).
local function claim_new(c, key, fp)
  claims_queue(c, key, fp)
end

-- claim_new for the URLs of a batch in order, cheaper per URL: q = claims_queued(c, key),
-- and `later`: whether a URL present in the data may follow (claims_none false), which
-- alone needs c.fresh (a repeat of a URL answered new earlier in the call is seen).
local function claim_new_into(c, q, fp, later)
  local n = #q
  q[n + 1] = fp
  q[n + 2] = c.mine
  if later then c.fresh[fp] = true end
end

-- The answer for a URL present in the data whose claim is (owner, prio, call, deadline)
-- (owner nil: none): '0', '1' or 'P' (above), and whether it is a takeover (the caller then
-- claims it).
local function claim_answer(c, owner, prio, call, deadline)
  if not owner then return SEEN, false end
  if owner == c.owner then
    if tostring(call) == c.call then return NEW, false end -- a resent call: as the first time
    -- The asker's own claim, abandoned after a call whose every reply was lost (its caller
    -- never got the answer): new again. Merely past its lease, it is seen: this client is
    -- alive and its caller got the first answer, so a lease shorter than a batch never makes
    -- one client answer a URL new twice.
    if deadline == 0 then return NEW, true end
    return SEEN, false
  end
  if deadline <= c.now then return NEW, true end
  if prio < c.prio or (prio == c.prio and owner < c.owner) then return PENDING, false end
  return SEEN, false
end

-- A URL present in the data: '0', '1' or 'P', from claims_lookup's reading of `key`.
local function claim_present(c, key, fp)
  if c.fresh[fp] then return SEEN end -- answered new earlier in this call: a repeat
  local answer, takeover = claim_answer(c, claims_parse(c.known[key][fp]))
  if takeover then
    claims_queue(c, key, fp)
  elseif answer == NEW then
    c.fresh[fp] = true
  end
  return answer
end

-- Write the claims this call made (one HSET per claims hash): before the data they cover.
local function claims_write(c)
  for key, q in pairs(c.queued) do claims_each('HSET', key, q) end
  c.queued = {}
end

-- The asker's own claim `value`, its lease ended now (how: "abandon") or started anew
-- ("renew").
local function claim_released(c, value, how)
  local owner, prio, call = claims_parse(value)
  return owner .. ' ' .. prio .. ' ' .. call .. ' ' .. (how == 'renew' and c.deadline or 0)
end

-- Release the asker's own claims of the fingerprints in `fps` (a list), how: "ack" deletes
-- them, "abandon" ends their lease now, "renew" starts a new lease (a client still waiting
-- inside its batch). Returns a list: '1' where the claim was still the asker's, '0' where it
-- was gone or taken over by another client.
local function claims_release(c, key, fps, how)
  local out, hit = {}, {}
  for s = 1, #fps, UNPACK_MAX do
    local last = math.min(s + UNPACK_MAX - 1, #fps)
    local values = redis.call('HMGET', key, unpack(fps, s, last))
    for i = s, last do
      local value = values[i - s + 1]
      if value and string.find(value, c.tag, 1, true) == 1 then -- no substring made
        out[i] = NEW
        if how == 'ack' then
          hit[#hit + 1] = fps[i]
        else
          hit[#hit + 1] = fps[i]
          hit[#hit + 1] = claim_released(c, value, how)
        end
      else
        out[i] = SEEN
      end
    end
  end
  if #hit > 0 then claims_each(how == 'ack' and 'HDEL' or 'HSET', key, hit) end
  return out
end

-- Claims of whole calls (RedisBloomFilter, and each leaf of a SplittableBloomFilter, in a
-- records hash of its own beside its claims): a call that answers keys new (absent from the
-- data) claims them all in one field of a second hash, `records`: field "OWNER CALL", value
-- this call's claim, a newline, then the keys' fingerprints packed (`size` bytes each). Its
-- client acknowledges them by deleting that field: claiming and acknowledging a batch cost
-- O(1) commands and no Lua work per key (benchmarks/tools/redis_script_profile.py measures what a
-- field per key costs). Whatever reads or changes claims one by one (a
-- lookup of keys found present, a release other than that deletion) first expands every
-- record into per-key claims (claims_expand, once per record), so the rules above hold
-- unchanged. Returns false when the field exists already (a resent call: never on the paths
-- that use it, but then the caller claims per key).
local function claims_record(c, records, fps)
  return redis.call('HSETNX', records, c.owner .. ' ' .. c.call, c.mine .. '\n' .. fps) == 1
end

-- Every record of `records` turned into per-key claims of the hash `key` (claims_record).
local function claims_expand(records, key, size)
  local all = redis.call('HGETALL', records)
  if #all == 0 then return end
  local sub, find, fields = string.sub, string.find, {}
  for i = 2, #all, 2 do
    local value = all[i]
    local cut = find(value, '\n', 1, true)
    local claim = sub(value, 1, cut - 1)
    for s = cut + 1, #value, size do
      fields[#fields + 1] = sub(value, s, s + size - 1)
      fields[#fields + 1] = claim
    end
  end
  claims_each('HSET', key, fields)
  redis.call('DEL', records)
end
