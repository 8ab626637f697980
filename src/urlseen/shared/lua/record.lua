-- record.lua: create a shared filter's record, or read the one that exists, in one atomic step.
-- Every shared filter named N has a kind record urlseen:{N}:kind (a string: "bloom",
-- "library", "dsbf"), so that one name never holds two kinds, and its parameters in a hash in
-- the same slot (fields "params": JSON, "instance": a random id written at creation, which
-- every batch script checks so that a filter whose keys vanished is never silently made anew).
--
-- KEYS[1]: the kind record; KEYS[2]: the parameter hash; KEYS[3]: a string to allocate (or a
--          key that is left alone when ARGV[5] is 0)
-- ARGV[1]: the kind; ARGV[2]: the parameters (JSON); ARGV[3]: the instance; ARGV[4]: "create"
--          (create if the name is free) or "read"; ARGV[5]: bytes to allocate in KEYS[3]
-- Returns {kind, params}: kind "" when the name holds data without a kind record (not made by
-- this version of urlseen); params "" when the record lost its parameters; {} when the name is
-- free and ARGV[4] is "read".
local kind = redis.call('GET', KEYS[1])
if not kind then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'', redis.call('HGET', KEYS[2], 'params') or ''}
  end
  if ARGV[4] ~= 'create' then return {} end
  redis.call('SET', KEYS[1], ARGV[1])
  redis.call('HSET', KEYS[2], 'params', ARGV[2], 'instance', ARGV[3], 'count', 0)
  local nbytes = tonumber(ARGV[5])
  if nbytes > 0 then redis.call('SETRANGE', KEYS[3], nbytes - 1, '\0') end
  return {ARGV[1], ARGV[2]}
end
if kind ~= ARGV[1] then return {kind, ''} end
return {kind, redis.call('HGET', KEYS[2], 'params') or ''}
