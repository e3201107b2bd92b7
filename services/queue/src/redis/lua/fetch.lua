-- ARGV: worker, max, lease (ms), idle_only ('1': the express reviewers'
-- fetch: only tenants none of whose entries is leased now, one entry each).
-- Returns {expires_at, {{tenant, id, proposal, delivered}, ...}}.
--
-- Fair across tenants: a round visits every tenant with entries, starting one
-- further each fetch, and takes at most ceil(max / tenants) from each; rounds
-- repeat (with the quota recomputed) while entries are wanted and some tenant
-- still gave one. Within a tenant, entries whose lease ran out or whose
-- release delay is over come first, then new ones.
local worker, max, lease_ms = ARGV[3], tonumber(ARGV[4]), tonumber(ARGV[5])
local idle_only = ARGV[6] == '1'
if worker == PARKED then
  return redis.error_reply('the consumer name ' .. PARKED .. ' is reserved')
end
local now = now_ms()
local expires = now + lease_ms
redis.call('ZADD', consumers_key, now, worker)

local out = {}
local tenants = redis.call('ZRANGE', tenants_key, 0, -1)
local n = #tenants
if n == 0 or max <= 0 then
  return {expires, out}
end

-- Claims pending entries (due ones of `zset`) for the worker; XCLAIM counts a delivery.
local function claim_due(t, zset, k)
  local got = 0
  if k <= 0 then return 0 end
  local s = stream_key(t)
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', zset, '-inf', now, 'LIMIT', 0, k)) do
    redis.call('ZREM', zset, id)
    local entries = redis.call('XCLAIM', s, group, worker, 0, id)
    local entry = entries[1]
    if entry then
      local _, delivered = holder(t, id)
      redis.call('ZADD', leased_key(t), expires, id)
      out[#out + 1] = {t, id, entry[2][2], delivered}
      got = got + 1
    end
  end
  return got
end

local function take(t, k)
  -- Only a live lease makes a tenant busy (one that ran out is nobody's
  -- review). The entry taken here makes it busy for the next round, and the
  -- cap of one keeps it to one entry in this one.
  if idle_only then
    if redis.call('ZCOUNT', leased_key(t), '(' .. now, '+inf') > 0 then
      return 0
    end
    k = math.min(k, 1)
  end
  local got = claim_due(t, parked_key(t), k)
  got = got + claim_due(t, leased_key(t), k - got)
  if got < k then
    local r = redis.pcall('XREADGROUP', 'GROUP', group, worker, 'COUNT', k - got,
      'STREAMS', stream_key(t), '>')
    if type(r) == 'table' and r.err == nil then
      for _, entry in ipairs(r[1][2]) do
        redis.call('ZADD', leased_key(t), expires, entry[1])
        out[#out + 1] = {t, entry[1], entry[2][2], 1}
        got = got + 1
      end
    elseif type(r) == 'table' then
      -- The stream or its group is gone (Redis lost its data): forget the tenant.
      redis.call('ZREM', tenants_key, t)
    end
  end
  return got
end

local start = redis.call('INCR', rr_key) % n
local remaining = max
repeat
  local quota = math.ceil(remaining / n)
  local gave = 0
  for i = 0, n - 1 do
    if remaining == 0 then break end
    local got = take(tenants[(start + i) % n + 1], math.min(quota, remaining))
    remaining = remaining - got
    gave = gave + got
  end
until remaining == 0 or gave == 0
return {expires, out}
