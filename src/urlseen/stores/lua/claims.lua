-- claims.lua: the claims of urlseen's shared filters (urlseen.stores.redis_claims), put in
-- front of each batch script that uses them (bloom_batch.lua, library_batch.lua).
--
-- A claim says "this URL was answered new to client OWNER, which has not acknowledged it yet".
-- It is a field of a hash in the slot of the URL's data: field = the URL's fingerprint, value
-- = "OWNER PRIO CALL DEADLINE": the client's id, the priority of its batch (Unix ms by the
-- client's clock: the older the higher), the id of the script call that made the claim, and
-- the lease's end (Unix ms by this server's clock). Claims are written before the data they
-- cover, so a script stopped part way leaves claims without data (harmless), never data
-- without claims.
--
-- A URL whose data says "seen" is answered by its claim:
--   no claim, or the asker's own claim from an earlier call       -> '0' seen
--   the asker's own claim from this very call (a resent call)     -> '1' new, as the first time
--   another client's claim whose lease ended                      -> '1' new: taken over
--   another client's live claim, older than the asker's batch     -> 'P' pending: ask again
--   another client's live claim, younger than the asker's batch   -> '0' seen (its claimer
--       delivers it, or its claim outlives it; never waiting on a younger claim means that
--       clients never wait on each other in a circle)

local function claims_now()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- owner, prio, call, lease_ms: this call's side (ARGV of the script)
local function claims_context(owner, prio, call, lease_ms)
  local now = claims_now()
  return {owner = owner, prio = tonumber(prio), call = call, now = now, tag = owner .. ' ',
          mine = owner .. ' ' .. prio .. ' ' .. call .. ' ' .. (now + tonumber(lease_ms)),
          fresh = {}, empty = {}}
end

-- Whether the claims hash `key` held no claim when this call first touched it: then every
-- claim in it is this call's own (c.fresh), and no URL needs its claim read.
local function claims_empty(c, key)
  local empty = c.empty[key]
  if empty == nil then
    empty = redis.call('EXISTS', key) == 0
    c.empty[key] = empty
  end
  return empty
end

local function claims_parse(value)
  local owner, prio, call, deadline = string.match(value, '^(%S+) (%d+) (%S+) (%d+)$')
  return owner, tonumber(prio), call, tonumber(deadline)
end

-- A URL absent from the data: this call answers it new and claims it.
local function claim_new(c, key, fp)
  claims_empty(c, key)
  redis.call('HSET', key, fp, c.mine)
  c.fresh[fp] = true
end

-- A URL present in the data: '0', '1' or 'P' (above).
local function claim_present(c, key, fp)
  if c.fresh[fp] then return '0' end -- answered new earlier in this call: a repeat
  if claims_empty(c, key) then return '0' end
  local value = redis.call('HGET', key, fp)
  if not value then return '0' end
  local owner, prio, call, deadline = claims_parse(value)
  if owner == c.owner then
    if call == c.call then
      c.fresh[fp] = true
      return '1'
    end
    return '0'
  end
  if deadline <= c.now then
    redis.call('HSET', key, fp, c.mine)
    c.fresh[fp] = true
    return '1'
  end
  if prio < c.prio or (prio == c.prio and owner < c.owner) then return 'P' end
  return '0'
end

-- Release the asker's own claim of fp, how: "ack" deletes it, "abandon" ends its lease now,
-- "renew" starts a new lease (a client still waiting inside its batch). '1' if it was still
-- the asker's, '0' if it was gone or taken over by another client.
local function claim_release(c, key, fp, how)
  local value = redis.call('HGET', key, fp)
  if not value or string.sub(value, 1, #c.tag) ~= c.tag then return '0' end
  if how == 'ack' then
    redis.call('HDEL', key, fp)
  else
    local owner, prio, call = claims_parse(value)
    local deadline = how == 'renew' and string.match(c.mine, '(%d+)$') or '0'
    redis.call('HSET', key, fp, owner .. ' ' .. prio .. ' ' .. call .. ' ' .. deadline)
  end
  return '1'
end
