-- ARGV: tenant, proposal. Returns 1 if added, 0 if the proposal was queued already.
local t, proposal = ARGV[3], ARGV[4]
if redis.call('HEXISTS', ids_key(t), proposal) == 1 then
  return 0
end
local s = stream_key(t)
-- Creates the stream with its group; BUSYGROUP (it exists) is fine.
redis.pcall('XGROUP', 'CREATE', s, group, '0', 'MKSTREAM')
local id = redis.call('XADD', s, '*', 'proposal', proposal)
redis.call('HSET', ids_key(t), proposal, id)
redis.call('ZADD', tenants_key, 0, t)
redis.call('SADD', streams_key, t)
return 1
