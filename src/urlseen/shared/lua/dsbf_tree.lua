-- dsbf_tree.lua: the tree of a SplittableBloomFilter, one Redis hash (KEYS[1]), changed only
-- here so that every change is atomic and bumps "version" (clients cache the tree).
--
-- Fields: params (JSON), instance (the filter's random id, also written into every leaf),
-- ready (set once the first leaves exist), version, next (the last leaf id handed out),
-- node:<id> ("leaf <bits>", or "split <seed> <child>,<child>,..." once the node routes to
-- children; a leaf that grew has one child),
-- retired:<id> (the version whose swap replaced leaf <id>: its keys wait there until no
-- client reads an older tree), and split:<id> ("<token> <deadline ms> <children>") while a
-- client holds the split lock of leaf <id>. The lock lives here, beside the node it protects, so that the swap can check it: a
-- splitter whose lock expired and was taken over can never install its children (fencing).
--
-- KEYS[2]: the name's kind record (record.lua), set with the tree. KEYS[3]: the readers, a hash:
-- per client id, "<version> <deadline ms>": the tree version it last loaded, announced until
-- the deadline (a client that stops announcing holds nothing back once it passes).
-- ARGV[1] is the operation, ARGV[2] the instance the client opened (create: the new one),
-- followed, for a client that keeps a write mark (mark.lua, put in front), by its owner and the
-- mark it expects, space-separated; every operation but create answers the error
-- "URLSEEN-LOST ..." when the tree is gone or another filter's, "URLSEEN-ROLLBACK ..." when it
-- went back in time since the client's last call.
--   create  instance params root-description first_leaves bits -> {kind, params}: the params that
--           won (created if the name was free); kind "" when the name holds data without a
--           kind record, another kind's name when it holds another kind
--   load    owner ms [instance]        -> {kind, the tree's fields and values, retired leaves
--           free}: the tree as HGETALL reads it; with an owner (not ""), announced as the
--           version it reads for ms more, and the leaves retired at or below the oldest version
--           a live reader announces (none reads them: the caller deletes their keys, then
--           forgets them); ms 0 takes the announcement back. No instance: the caller learns it
--           here; a client that knows its instance announces nothing to another filter's tree.
--   ready   instance                   -> 1 (the first leaves exist)
--   ids     instance count             -> the last of count fresh leaf ids
--   lock    instance leaf token ms     -> {"ok", children of an expired attempt} | {"busy"} |
--           {"done"}
--   refresh instance leaf token ms children -> 1 if token still holds the lock (deadline extended)
--   swap    instance leaf token description bits children... -> the new version, or 0 (lock
--           lost / done); the children are leaves of `bits` bits
--   unlock  instance leaf token        -> 1 if released
--   forget  instance leaves...         -> 1: the retired leaves' keys are deleted
local op, tree = ARGV[1], KEYS[1]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function is_leaf(leaf)
  local node = redis.call('HGET', tree, 'node:' .. leaf)
  return node and string.sub(node, 1, 5) == 'leaf '
end

local function holder(leaf)
  local cur = redis.call('HGET', tree, 'split:' .. leaf)
  if not cur then return nil end
  local token, deadline, children = string.match(cur, '^(%S+) (%d+) ?(.*)$')
  return token, tonumber(deadline), children
end

if op == 'create' then
  local kind = redis.call('GET', KEYS[2])
  if kind then return {kind, redis.call('HGET', tree, 'params') or ''} end
  if redis.call('EXISTS', tree) == 1 then return {'', redis.call('HGET', tree, 'params') or ''} end
  local first_leaves = tonumber(ARGV[5])
  redis.call('SET', KEYS[2], 'dsbf')
  redis.call('HSET', tree, 'params', ARGV[3], 'instance', ARGV[2], 'version', 1,
             'next', first_leaves - 1, 'node:root', ARGV[4])
  for i = 0, first_leaves - 1 do redis.call('HSET', tree, 'node:' .. i, 'leaf ' .. ARGV[6]) end
  return {'dsbf', ARGV[3]}
end

if op == 'load' then
  local kind = redis.call('GET', KEYS[2]) or ''
  local raw = redis.call('HGETALL', tree)
  local version, free = redis.call('HGET', tree, 'version'), {}
  if ARGV[2] == '' or not tonumber(version or '') then return {kind, raw, free} end
  if (ARGV[4] or '') ~= '' and ARGV[4] ~= redis.call('HGET', tree, 'instance') then
    return {kind, raw, free}
  end
  local readers, now, ms = KEYS[3], now_ms(), tonumber(ARGV[3])
  redis.call('HSET', readers, ARGV[2], version .. ' ' .. (now + ms))
  if redis.call('PTTL', readers) < ms then redis.call('PEXPIRE', readers, ms) end
  local floor, all = tonumber(version), redis.call('HGETALL', readers)
  for i = 1, #all, 2 do
    local seen, deadline = string.match(all[i + 1], '^(%d+) (%d+)$')
    if not seen or tonumber(deadline) <= now then
      redis.call('HDEL', readers, all[i])
    elseif tonumber(seen) < floor then
      floor = tonumber(seen)
    end
  end
  for i = 1, #raw, 2 do
    if string.sub(raw[i], 1, 8) == 'retired:' and (tonumber(raw[i + 1]) or 0) <= floor then
      free[#free + 1] = string.sub(raw[i], 9)
    end
  end
  return {kind, raw, free}
end

local opened, owner, mark = string.match(ARGV[2], '^(%S+) ?(%S*) ?(%d*)$')
local instance = redis.call('HGET', tree, 'instance')
if instance ~= opened then
  if not instance then return redis.error_reply('URLSEEN-LOST ' .. tree .. ' is gone') end
  return redis.error_reply('URLSEEN-LOST ' .. tree .. ' belongs to another filter of the '
                           .. 'same name, created since')
end
if owner ~= '' then
  local went_back = mark_advance(tree, owner, mark)
  if went_back then return redis.error_reply(went_back) end
end

if op == 'ready' then
  redis.call('HSET', tree, 'ready', 1)
  return 1
elseif op == 'ids' then
  return redis.call('HINCRBY', tree, 'next', tonumber(ARGV[3]))
elseif op == 'lock' then
  local leaf, token, ms = ARGV[3], ARGV[4], tonumber(ARGV[5])
  if not is_leaf(leaf) then return {'done'} end
  local held, deadline, children = holder(leaf)
  local now = now_ms()
  if held and held ~= token and deadline > now then return {'busy'} end
  redis.call('HSET', tree, 'split:' .. leaf, token .. ' ' .. (now + ms) .. ' ')
  return {'ok', children or ''}
elseif op == 'refresh' then
  local leaf, token, ms = ARGV[3], ARGV[4], tonumber(ARGV[5])
  if holder(leaf) ~= token then return 0 end
  redis.call('HSET', tree, 'split:' .. leaf, token .. ' ' .. (now_ms() + ms) .. ' ' .. ARGV[6])
  return 1
elseif op == 'swap' then
  local leaf, token = ARGV[3], ARGV[4]
  if holder(leaf) ~= token or not is_leaf(leaf) then return 0 end
  redis.call('HSET', tree, 'node:' .. leaf, ARGV[5])
  for i = 7, #ARGV do redis.call('HSET', tree, 'node:' .. ARGV[i], 'leaf ' .. ARGV[6]) end
  redis.call('HDEL', tree, 'split:' .. leaf)
  local version = redis.call('HINCRBY', tree, 'version', 1)
  redis.call('HSET', tree, 'retired:' .. leaf, version)
  return version
elseif op == 'unlock' then
  if holder(ARGV[3]) ~= ARGV[4] then return 0 end
  return redis.call('HDEL', tree, 'split:' .. ARGV[3])
elseif op == 'forget' then
  for i = 3, #ARGV do redis.call('HDEL', tree, 'retired:' .. ARGV[i]) end
  return 1
end
return redis.error_reply('dsbf_tree.lua: unknown operation ' .. tostring(op))
