-- library_claims.lua: how urlseen's Redis fingerprint library releases claims, put in front
-- of library_batch.lua (which describes where they live) after claims.lua.

-- Release (mode "ack", "abandon" or "renew") the caller's claims of `fps` (a list) in one
-- group (`key`: its per-key claims, `records`: its call records). An acknowledgement given
-- `calls` (space-separated call ids) deletes the caller's records of those calls whole:
-- their fingerprints are still the caller's, for a record is expanded before anyone looks
-- its claims up or takes one over. The rest is released per key (claims_release), every
-- record expanded first when no calls are given. Returns a list: NEW where the claim was
-- still the caller's, SEEN where it was gone or taken over.
local function library_release(claims, mode, calls, key, records, fps)
  local mine, sub = {}, string.sub
  if mode == 'ack' and calls ~= '' then
    for call in string.gmatch(calls, '%S+') do
      local field = claims.owner .. ' ' .. call
      local value = redis.call('HGET', records, field)
      if value then
        for s = string.find(value, '\n', 1, true) + 1, #value, 16 do
          mine[sub(value, s, s + 15)] = true
        end
        redis.call('HDEL', records, field)
      end
    end
  else
    claims_expand(records, key, 16)
  end
  local out, rest, at = {}, {}, {}
  for j, fp in ipairs(fps) do
    if mine[fp] then
      out[j] = NEW
    else
      rest[#rest + 1], at[#at + 1] = fp, j
    end
  end
  if #rest > 0 then
    local answers = claims_release(claims, key, rest, mode)
    for k, j in ipairs(at) do out[j] = answers[k] end
  end
  return out
end
