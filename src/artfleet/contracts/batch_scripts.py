"""The Lua scripts of the step-batch contract (artfleet.contracts.batches): each one
transition of a step's keys, atomic in Redis (and in one cluster slot: every key of a step
shares its `{job:step}` hash tag). `StepBatches` registers them; the rules they keep are
in that module's docstring. A script's KEYS and ARGV are listed above it."""

from __future__ import annotations

# KEYS: groups, status, notify, closed, claims, lease. ARGV: group id, state, payload, ttl,
# token of the run that publishes ('' for none): its own lease and claim go, whatever the
# outcome.
PUBLISH = """
if ARGV[5] ~= '' then
  if redis.call('GET', KEYS[6]) == ARGV[5] then redis.call('DEL', KEYS[6]) end
  if redis.call('HGET', KEYS[5], ARGV[1]) == ARGV[5] then redis.call('HDEL', KEYS[5], ARGV[1]) end
end
if redis.call('EXISTS', KEYS[4]) == 1 then return 'closed' end
local current = tonumber(redis.call('HGET', KEYS[2], ARGV[1]) or '0')
if current >= tonumber(ARGV[2]) then return 'kept' end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[2])
redis.call('RPUSH', KEYS[3], ARGV[1])
for i = 1, 3 do redis.call('EXPIRE', KEYS[i], ARGV[4]) end
return 'stored'
"""

# KEYS: closed, status, claims, lease. ARGV: group id, token, lease ms, lowest final state,
# ttl.
CLAIM = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 'closed' end
local state = redis.call('HGET', KEYS[2], ARGV[1])
if state and tonumber(state) >= tonumber(ARGV[4]) then return 'final' end
local holder = redis.call('GET', KEYS[4])
if holder and holder ~= ARGV[2] then return 'held' end
redis.call('HSET', KEYS[3], ARGV[1], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[5])
redis.call('SET', KEYS[4], ARGV[2], 'PX', ARGV[3])
return 'claimed'
"""

# KEYS: lease. ARGV: token, lease ms. 1 when renewed; 0 when the lease is gone or not ours
# (a renewal never recreates a lease the trainer may already have acted on).
RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
"""

# KEYS: the group's lease. ARGV: the run's token. A run that gives its group up (a worker
# shutting down) drops its own lease only: the trainer sees the loss at its next wake.
RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""

# Lease keys are made in the scripts below from ARGV[1], the step's lease prefix: they
# carry the step's hash tag, so they are in the slot of the declared keys.
# KEYS: claims, status. Returns the claimed, unanswered groups without a lease (their
# claims are taken away: each loss is reported once).
LOST = """
local lost = {}
local claims = redis.call('HGETALL', KEYS[1])
for i = 1, #claims, 2 do
  local gid = claims[i]
  if redis.call('HEXISTS', KEYS[2], gid) == 0 and redis.call('EXISTS', ARGV[1] .. gid) == 0 then
    redis.call('HDEL', KEYS[1], gid)
    table.insert(lost, gid)
  end
end
return lost
"""

# KEYS: groups, status, notify, closed, claims. ARGV: lease prefix, ttl.
CLOSE = """
local claims = redis.call('HKEYS', KEYS[5])
for i = 1, #claims do redis.call('DEL', ARGV[1] .. claims[i]) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[5])
redis.call('SET', KEYS[4], '1', 'EX', ARGV[2])
"""

# KEYS: groups, status, notify, claims. ARGV: lease prefix. CLOSE without the closed mark:
# the step is forgotten whole (final groups, claims and their leases) and runs again.
DISCARD = """
local claims = redis.call('HKEYS', KEYS[4])
for i = 1, #claims do redis.call('DEL', ARGV[1] .. claims[i]) end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[4])
"""

# KEYS: groups, status, claims. ARGV: lease prefix, the lowest final state. Returns the
# group ids kept. Claims without a live lease go (their groups are dispatched again);
# a live lease keeps its claim, so its run is still watched.
RESTART = """
local claims = redis.call('HKEYS', KEYS[3])
for i = 1, #claims do
  if redis.call('EXISTS', ARGV[1] .. claims[i]) == 0 then redis.call('HDEL', KEYS[3], claims[i]) end
end
local kept = {}
local entries = redis.call('HGETALL', KEYS[2])
for i = 1, #entries, 2 do
  if tonumber(entries[i + 1]) >= tonumber(ARGV[2]) then
    table.insert(kept, entries[i])
  else
    redis.call('HDEL', KEYS[1], entries[i])
    redis.call('HDEL', KEYS[2], entries[i])
  end
end
return kept
"""


# KEYS: groups, status, closed. ARGV: group ids. Forgets answered groups so they run again
# (the trainer's rule for groups sampled by a policy too old to train on); not once closed.
FORGET = """
if redis.call('EXISTS', KEYS[3]) == 1 then return 0 end
for i = 1, #ARGV do
  redis.call('HDEL', KEYS[1], ARGV[i])
  redis.call('HDEL', KEYS[2], ARGV[i])
end
return #ARGV
"""
