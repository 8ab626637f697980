-- bloom_batch.lua: one batch of a RedisBloomFilter in one atomic step: test (and, with ADD,
-- set) the bits of its keys, claiming each key answered new; or release or drop the caller's
-- claims. claims.lua, bits.lua and batch_claims.lua are put in front.
--
-- KEYS: bits meta claims records stage
-- ARGV: op instance nbytes layout fp_bytes masks fps owner priority call lease_ms mark
-- (urlseen.shared.scripts.BLOOM_BATCH builds them; the operation's tail follows ARGV)
--
-- bits: the filter's bits (bits.lua); meta: its hash (count: keys reported new; instance: the
-- filter's random id, set at creation); claims, records: its claims per key and of whole
-- calls (claims.lua); stage: the calling client's staged bits, for a whole rewrite (below).
-- op: urlseen.shared.scripts.Op (CONTAINS, ADD, ACK, ABANDON, RENEW, DROP); instance: the
-- instance the client opened; nbytes: the bits' length; layout: "blocked" or "standard";
-- fp_bytes: a fingerprint's width; masks: urlseen._core.byte_masks of the batch (CONTAINS,
-- ADD); fps: its fingerprints, the claims' fields (ADD, ACK, ABANDON, RENEW); owner, priority,
-- call, lease_ms: this call's side of the claims (claims.lua); mark: the caller's write mark
-- as it expects it (mark.lua, put in front too).
-- The tail: ADD: none, or the optimistic path's count, answers, blocks and blocks as read
-- (bits.lua, bits_agreed), or the count, answers, STAGED and "" (a rewrite, below); DROP: the
-- fingerprints whose claims it deletes unread (an acknowledgement younger than half a lease:
-- none can have been taken over).
--
-- Returns: ADD: per key NEW, SEEN, PENDING or OWN (bits.lua), then FELL_BACK if the
-- optimistic arguments were sent and not taken (blocks that changed since the client's read
-- are merged instead: bits_merge, below); CONTAINS: per key NEW (absent) or SEEN
-- (present); ACK, ABANDON, RENEW: per key NEW where the claim was still the caller's; DROP:
-- how many claims it deleted. Data that vanished is an error reply "URLSEEN-LOST ...", data
-- that went back in time "URLSEEN-ROLLBACK ...", before anything is written.

-- The optimistic path when blocks changed since the client's read (bits_agreed said false):
-- instead of deciding the whole batch here, only the keys the client said new whose block
-- changed are decided again (bits_blocked, from the block as it is now); the
-- others keep the client's answer (a block unchanged since the read decides its keys as it
-- did then; a key seen stays seen, bits are never cleared). A fleet's clients write each
-- other's blocks all the time on a small filter: this keeps the Lua work per key to the few
-- keys that met another client's writes. Returns per key whether new, how many are, and a
-- function that writes the unchanged blocks as sent and the changed ones as decided here.
local function bits_merge(key, masks, whole, n, said, blocks, olds)
  local changed, kept = {}, {}
  for j = 0, #olds / 64 - 1 do
    local base = u32_at(blocks, 68 * j + 1)
    local now = whole and sub(whole, base + 1, base + 64)
                or redis.call('GETRANGE', key, base, base + 63)
    if now ~= sub(olds, 64 * j + 1, 64 * j + 64) then
      changed[base] = true
    else
      kept[#kept + 1] = j
    end
  end
  local new, fresh, again, at = {}, 0, {}, {}
  local new_byte, pos, i = byte(NEW), 1, 0
  while pos <= #masks do
    local c, b1, b2, b3, b4 = byte(masks, pos, pos + 4)
    i = i + 1
    local is_new = byte(said, i) == new_byte
    if is_new and changed[b1 + b2 * 256 + b3 * 65536 + b4 * 16777216] then
      again[#again + 1] = sub(masks, pos, pos + 4 + 2 * c)
      at[#at + 1] = i
    elseif is_new then
      fresh = fresh + 1
    end
    new[i] = is_new
    pos = pos + 5 + 2 * c
  end
  if i ~= n then return nil end
  local decided, _, more, write = bits_blocked(key, table.concat(again), whole, false, true)
  for t, k in ipairs(at) do new[k] = decided[t] end
  return new, fresh + more, function()
    for _, j in ipairs(kept) do
      redis.call('SETRANGE', key, u32_at(blocks, 68 * j + 1), sub(blocks, 68 * j + 5, 68 * j + 68))
    end
    write()
  end
end

local op, instance, nbytes, layout = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4]
local width, masks, fps = tonumber(ARGV[5]), ARGV[6], ARGV[7]
local TAIL = 12 -- ARGV before the operation's tail
local bits_key, meta_key, claims_key, records_key, stage_key = KEYS[1], KEYS[2], KEYS[3],
                                                                KEYS[4], KEYS[5]

local meta = redis.call('HMGET', meta_key, 'instance', 'count')
if meta[1] ~= instance then
  if not meta[1] then return redis.error_reply('URLSEEN-LOST ' .. meta_key .. ' is gone') end
  return redis.error_reply('URLSEEN-LOST ' .. meta_key .. ' belongs to another filter of the '
                           .. 'same name, created since')
end
if redis.call('STRLEN', bits_key) ~= nbytes then
  return redis.error_reply('URLSEEN-LOST ' .. bits_key .. ' is gone or damaged')
end
if meta[2] and not tonumber(meta[2]) then
  return redis.error_reply('URLSEEN-DAMAGED Redis key ' .. meta_key .. ': field count is not a '
                           .. 'number')
end
local went_back = mark_advance(meta_key, ARGV[8], ARGV[12])
if went_back then return redis.error_reply(went_back) end

if op == OP_DROP then
  claims_expand(records_key, claims_key, width)
  return batch_drop_each(claims_key, ARGV, TAIL + 1)
end
local claims
if op ~= OP_CONTAINS then claims = claims_context(ARGV[8], ARGV[9], ARGV[10], ARGV[11]) end
if RELEASE_HOW[op] then
  return batch_release(claims, claims_key, records_key, fps, width, RELEASE_HOW[op])
end

local whole = bits_whole(bits_key, nbytes, layout, masks)
local new, n, fresh, write, fell_back
if op == OP_ADD and layout == 'blocked' and ARGV[TAIL + 4] then
  n = #fps / width
  local count, said, blocks, olds = ARGV[TAIL + 1], ARGV[TAIL + 2], ARGV[TAIL + 3],
                                    ARGV[TAIL + 4]
  if blocks == STAGED and olds == '' then
    -- A client alone on a small filter stages the whole bits as the batch leaves them (SET
    -- with an expiry, just before this call), taken only if the count is as read (then
    -- nothing was written since the bits it started from) by renaming the stage over the
    -- bits: O(1) here, instead of a SETRANGE per block. Not taken, the stage is deleted.
    if #said == n then
      if count == (meta[2] or '') and redis.call('STRLEN', stage_key) == nbytes then
        new, fresh = bits_said(said, n)
        write = function()
          redis.call('RENAME', stage_key, bits_key)
          redis.call('PERSIST', bits_key) -- RENAME kept the stage's expiry
        end
      else
        fell_back = true
      end
    end
    if not new then redis.call('DEL', stage_key) end
  else
    if count == (meta[2] or '') then -- no bits written since the read (bits_agreed)
      if bits_agreed(bits_key, whole, n, count, count, said, blocks, olds) then
        new, fresh = bits_said(said, n)
        write = function() bits_write_blocks(bits_key, blocks) end
      end
    elseif #said == n and #olds % 64 == 0 and #blocks == 68 * (#olds / 64) then
      -- some may have changed: each block is compared once, its new keys decided again
      new, fresh, write = bits_merge(bits_key, masks, whole, n, said, blocks, olds)
      fell_back = not new
    end
  end
end
if not new then
  new, n, fresh, write = bits_decide(bits_key, masks, layout, whole, false, op == OP_ADD)
end
if op ~= OP_ADD then return batch_plain_answers(n, new) end
local answer = batch_answers(claims, claims_key, records_key, fps, width, n, new, fresh)
write()
if fresh > 0 then redis.call('HINCRBY', meta_key, 'count', fresh) end
return answer .. (fell_back and FELL_BACK or '')
