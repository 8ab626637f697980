-- mark.lua: a filter that went back in time (Redis restored from an earlier snapshot, or a
-- failover to a replica that lagged) is noticed by every client that wrote to it since, put
-- in front of each batch script (shared/marks.py is the client's side).
--
-- Each client keeps a write mark in the hash that holds a part's instance (a Bloom filter's
-- meta, a library group's counters, a leaf's meta, a frontier's marks): field "w:OWNER", the
-- number of script calls of that client that passed the check, which only that client
-- advances. The client sends the number it expects; the stored one is that number (advanced
-- here), or one more (a call resent after its reply was lost: it ran already), or the data
-- came back from before the client's last call: the part is marked "rolled_back" (so every
-- other client stops at its next call too) and the call answers "URLSEEN-ROLLBACK ...",
-- before anything is written.
-- mark_advance from the caller's own read of "w:OWNER" (stored) and "rolled_back" (rolled);
-- have, want: tonumber(stored or '0') and tonumber(expected).
local function mark_advance_read(key, owner, expected, stored, rolled, have, want)
  if rolled then
    return 'URLSEEN-ROLLBACK ' .. key .. ' went back in time (another client noticed: ' ..
           rolled .. ')'
  end
  if not have then
    return 'URLSEEN-DAMAGED Redis key ' .. key .. ': field w:' .. owner .. ' is not a number'
  end
  if have == want then
    redis.call('HSET', key, 'w:' .. owner, want + 1)
    return nil
  end
  if have == want + 1 then return nil end
  local why = 'a client expected write mark ' .. want .. ' and found ' .. (stored or 'none')
  redis.call('HSET', key, 'rolled_back', why)
  return 'URLSEEN-ROLLBACK ' .. key .. ' went back in time (' .. why .. ')'
end

local function mark_advance(key, owner, expected)
  local found = redis.call('HMGET', key, 'w:' .. owner, 'rolled_back')
  return mark_advance_read(key, owner, expected, found[1], found[2], tonumber(found[1] or '0'),
                           tonumber(expected))
end
