-- Shared by every script (prepended to each). ARGV[1] is the key prefix and
-- ARGV[2] the consumer group; a script's own arguments start at ARGV[3].
--
-- Keys, per tenant T:
--   P:q:T        the stream of T's entries (undelivered + pending)
--   P:leased:T   zset: stream id -> lease expiry (ms) of entries a worker holds
--   P:parked:T   zset: stream id -> ready time (ms) of pending entries nobody
--                holds (released, or reclaimed after their lease ran out);
--                in the PEL they belong to the consumer PARKED
--   P:ids:T      hash: proposal id -> stream id (or 'dead'): enqueue is idempotent
--   P:dead:T     the dead-letter stream
-- and once:
--   P:tenants    zset (all scores 0): tenants whose stream has entries
--   P:streams    set: tenants whose stream was ever created (consumer clean-up)
--   P:consumers  zset: consumer -> last seen (ms), the workers' heartbeats
--   P:rr         counter: where the next fetch starts its round
local prefix, group = ARGV[1], ARGV[2]
local PARKED = '(parked)'

local function stream_key(t) return prefix .. ':q:' .. t end
local function leased_key(t) return prefix .. ':leased:' .. t end
local function parked_key(t) return prefix .. ':parked:' .. t end
local function ids_key(t) return prefix .. ':ids:' .. t end
local function dead_key(t) return prefix .. ':dead:' .. t end
local tenants_key = prefix .. ':tenants'
local streams_key = prefix .. ':streams'
local consumers_key = prefix .. ':consumers'
local rr_key = prefix .. ':rr'

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The consumer holding a pending entry and how often it was delivered, or nil.
local function holder(t, id)
  local p = redis.call('XPENDING', stream_key(t), group, id, id, 1)
  if #p == 0 then return nil, 0 end
  return p[1][2], tonumber(p[1][4])
end

-- Whether the lease (consumer, delivery count) is the entry's current one:
-- a reclaim or a later fetch changes the owner or the count.
local function holds(t, id, consumer, delivered)
  local c, n = holder(t, id)
  return c == consumer and n == tonumber(delivered)
end

-- Drops a tenant from the registry once its stream is empty.
local function settle_tenant(t)
  if redis.call('XLEN', stream_key(t)) == 0 then
    redis.call('ZREM', tenants_key, t)
  end
end

-- Takes an entry out of the queue for good (acked or dead-lettered).
local function remove(t, id, proposal, mark)
  local s = stream_key(t)
  redis.call('XACK', s, group, id)
  redis.call('XDEL', s, id)
  redis.call('ZREM', leased_key(t), id)
  redis.call('ZREM', parked_key(t), id)
  if redis.call('HGET', ids_key(t), proposal) == id then
    if mark then
      redis.call('HSET', ids_key(t), proposal, mark)
    else
      redis.call('HDEL', ids_key(t), proposal)
    end
  end
  settle_tenant(t)
end

-- Hands a pending entry to nobody, ready at `ready_at`: its holder's token is void.
local function park(t, id, ready_at)
  redis.call('XCLAIM', stream_key(t), group, PARKED, 0, id, 'JUSTID')
  redis.call('ZREM', leased_key(t), id)
  redis.call('ZADD', parked_key(t), ready_at, id)
end
