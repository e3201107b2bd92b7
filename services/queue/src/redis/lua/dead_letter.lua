-- ARGV: tenant, id, consumer, delivered, proposal, reason. Moves a held entry
-- to the tenant's dead-letter stream with the reason, and acks it.
local t, id, consumer, delivered, proposal, reason =
  ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8]
if not holds(t, id, consumer, delivered) then
  return 0
end
redis.call('XADD', dead_key(t), '*', 'proposal', proposal, 'reason', reason,
  'entry', id, 'attempts', delivered, 'consumer', consumer)
remove(t, id, proposal, 'dead')
return 1
