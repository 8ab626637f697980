-- dsbf_tree.lua: the tree of a SplittableBloomFilter, one Redis hash (KEYS[1]), changed only
-- here so that every change is atomic and bumps "version" (clients cache the tree).
--
-- Fields: params (JSON), version, next (the last leaf id handed out), node:<id> ("leaf", or
-- "split <seed> <child>,<child>,..." once the node routes to children), and split:<id>
-- ("<token> <deadline ms> <children>") while a client holds the split lock of leaf <id>.
-- The lock lives here, beside the node it protects, so that the swap can check it: a splitter
-- whose lock expired and was taken over can never install its children (fencing).
--
-- ARGV[1] is the operation:
--   create  params root-description first_leaves -> the params that won (created if absent)
--   ids     count                      -> the last of count fresh leaf ids
--   lock    leaf token ms              -> {"ok", children of an expired attempt} | {"busy"} | {"done"}
--   refresh leaf token ms children     -> 1 if token still holds the lock (deadline extended)
--   swap    leaf token description children... -> the new version, or 0 (lock lost / done)
--   unlock  leaf token                 -> 1 if released
local op, tree = ARGV[1], KEYS[1]

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function holder(leaf)
  local cur = redis.call('HGET', tree, 'split:' .. leaf)
  if not cur then return nil end
  local token, deadline, children = string.match(cur, '^(%S+) (%d+) ?(.*)$')
  return token, tonumber(deadline), children
end

if op == 'create' then
  local params = redis.call('HGET', tree, 'params')
  if params then return params end
  local first_leaves = tonumber(ARGV[4])
  redis.call('HSET', tree, 'params', ARGV[2], 'version', 1, 'next', first_leaves - 1,
             'node:root', ARGV[3])
  for i = 0, first_leaves - 1 do redis.call('HSET', tree, 'node:' .. i, 'leaf') end
  return ARGV[2]
elseif op == 'ids' then
  return redis.call('HINCRBY', tree, 'next', tonumber(ARGV[2]))
elseif op == 'lock' then
  local leaf, token, ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
  if redis.call('HGET', tree, 'node:' .. leaf) ~= 'leaf' then return {'done'} end
  local held, deadline, children = holder(leaf)
  local now = now_ms()
  if held and held ~= token and deadline > now then return {'busy'} end
  redis.call('HSET', tree, 'split:' .. leaf, token .. ' ' .. (now + ms) .. ' ')
  return {'ok', children or ''}
elseif op == 'refresh' then
  local leaf, token, ms = ARGV[2], ARGV[3], tonumber(ARGV[4])
  if holder(leaf) ~= token then return 0 end
  redis.call('HSET', tree, 'split:' .. leaf, token .. ' ' .. (now_ms() + ms) .. ' ' .. ARGV[5])
  return 1
elseif op == 'swap' then
  local leaf, token = ARGV[2], ARGV[3]
  if holder(leaf) ~= token or redis.call('HGET', tree, 'node:' .. leaf) ~= 'leaf' then
    return 0
  end
  redis.call('HSET', tree, 'node:' .. leaf, ARGV[4])
  for i = 5, #ARGV do redis.call('HSET', tree, 'node:' .. ARGV[i], 'leaf') end
  redis.call('HDEL', tree, 'split:' .. leaf)
  return redis.call('HINCRBY', tree, 'version', 1)
elseif op == 'unlock' then
  if holder(ARGV[2]) ~= ARGV[3] then return 0 end
  return redis.call('HDEL', tree, 'split:' .. ARGV[2])
end
return redis.error_reply('dsbf_tree.lua: unknown operation ' .. tostring(op))
