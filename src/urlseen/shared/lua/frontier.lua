-- A crawl's shared frontier (shared/frontier.py). Members are "<priority>|<order>": the queue
-- (a sorted set scored -priority, so equal scores fall back to the member's bytes: the
-- zero-padded order) hands out the highest priority first; a taken member moves to the leases
-- (scored by its deadline, the server's clock, in ms) until it is done or its lease ends.
-- KEYS[1] queue, KEYS[2] leases, KEYS[3] data (member -> request), KEYS[4] the write marks
-- ARGV[1] "take" | "renew" | "release" | "count", ARGV[2] the lease in ms, ARGV[3] the
-- process's id and ARGV[4] its write mark as it expects it (mark.lua, put in front: a
-- frontier that went back in time, or came back empty, answers "URLSEEN-ROLLBACK ..."); take:
-- ARGV[5] how many at most; renew, release: ARGV[5...] members (a new lease for each; back in
-- the queue)

local went_back = mark_advance(KEYS[4], ARGV[3], ARGV[4])
if went_back then return redis.error_reply(went_back) end
local now = redis.call('TIME')
local ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000)
local op = ARGV[1]
local FIRST = 5 -- the first member (renew, release)

if op == 'renew' then
  local kept = 0
  for i = FIRST, #ARGV do
    kept = kept + redis.call('ZADD', KEYS[2], 'XX', 'CH', ms + tonumber(ARGV[2]), ARGV[i])
  end
  return kept
end

if op == 'release' then
  local back = 0
  for i = FIRST, #ARGV do
    local priority = tonumber(string.match(ARGV[i], '^(-?%d+)|'))
    if redis.call('ZREM', KEYS[2], ARGV[i]) == 1 and priority then
      redis.call('ZADD', KEYS[1], -priority, ARGV[i])
      back = back + 1
    end
  end
  return back
end

-- Leases that ended go back to the queue (their holder died or stalled).
local returned = 0
local expired = redis.call('ZRANGEBYSCORE', KEYS[2], '-inf', ms, 'LIMIT', 0, 256)
for _, member in ipairs(expired) do
  local priority = tonumber(string.match(member, '^(-?%d+)|'))
  redis.call('ZREM', KEYS[2], member)
  if priority and redis.call('HEXISTS', KEYS[3], member) == 1 then
    redis.call('ZADD', KEYS[1], -priority, member)
    returned = returned + 1
  end
end

if op == 'count' then
  return {returned, redis.call('ZCARD', KEYS[1]), redis.call('ZCARD', KEYS[2])}
end

-- take: up to ARGV[3] members, best first, each leased.
local top = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[FIRST]) - 1)
local reply = {returned}
for _, member in ipairs(top) do
  redis.call('ZREM', KEYS[1], member)
  local data = redis.call('HGET', KEYS[3], member)
  if data then
    redis.call('ZADD', KEYS[2], ms + tonumber(ARGV[2]), member)
    table.insert(reply, member)
    table.insert(reply, data)
  end
end
return reply
