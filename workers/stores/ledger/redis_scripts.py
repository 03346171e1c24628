"""The Lua scripts of the Redis ledger (``redis_ledger.RedisLedger``): the read-modify-write steps every event takes
(``mark``, ``expect_segments``, ``segment_done``, ``claim_content``, ``end_work``), each atomic in one round trip.
"""

from __future__ import annotations

from engram.schemas.events import EventStatus
from engram.workers.stores.ledger.base import FINAL_STATUSES

#: Lua shared by the Redis ledger's scripts: ``set_status`` moves an event (its hash at ``key``) to ``status`` as
#: ``RedisLedger._set_status`` does inside a transaction; ``is_final`` tells the final statuses.
_LUA_COMMON = """
local function is_final(s) return {} end
local function set_status(key, prefix, tenant, eid, old, status, stage, reason, now_iso, now_ts)
  redis.call('HSET', key, 'status', status, 'stage', stage, 'reason', reason, 'updated_at', now_iso)
  if old and old ~= status then redis.call('ZREM', prefix .. 'tenant:' .. tenant .. ':status:' .. old, eid) end
  redis.call('ZADD', prefix .. 'tenant:' .. tenant .. ':status:' .. status, now_ts, eid)
  redis.call('ZADD', prefix .. 'tenant:' .. tenant .. ':events', now_ts, eid)
end
""".format(" or ".join(f"s == '{st.value}'" for st in FINAL_STATUSES))

# The event scripts return {-1} for an unknown event, {1, kind} when the event entered a final status, else {0}.
#: ``mark``: KEYS the event's hash; ARGV prefix, status, stage, reason, now (ISO 8601), now (epoch seconds).
LUA_MARK = (
    _LUA_COMMON
    + """
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant_id', 'event_id', 'kind')
if not rec[1] then return {-1} end
if is_final(rec[1]) and not is_final(ARGV[2]) then return {0} end
set_status(KEYS[1], ARGV[1], rec[2], rec[3], rec[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6])
if is_final(ARGV[2]) and not is_final(rec[1]) then return {1, rec[4]} end
return {0}
"""
)
#: ``expect_segments``: KEYS the event's hash and its segments; ARGV prefix, total, reason when done now, now
#: (ISO 8601), now (epoch seconds).
LUA_EXPECT_SEGMENTS = (
    _LUA_COMMON
    + """
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant_id', 'event_id', 'kind')
if not rec[1] then return {-1} end
redis.call('HSET', KEYS[1], 'segments_total', ARGV[2])
if not is_final(rec[1]) and redis.call('HLEN', KEYS[2]) >= tonumber(ARGV[2]) then
  set_status(KEYS[1], ARGV[1], rec[2], rec[3], rec[1], 'done', '', ARGV[3], ARGV[4], ARGV[5])
  return {1, rec[4]}
end
return {0}
"""
)
#: ``segment_done``: KEYS the event's hash and its segments; ARGV prefix, segment index, observations, now
#: (ISO 8601), now (epoch seconds). An event not final yet gets a new progress time (``_touch``).
LUA_SEGMENT_DONE = (
    _LUA_COMMON
    + """
local rec = redis.call('HMGET', KEYS[1], 'status', 'tenant_id', 'event_id', 'kind', 'segments_total')
if not rec[1] then return {-1} end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
if is_final(rec[1]) then return {0} end
if rec[5] and rec[5] ~= '' and redis.call('HLEN', KEYS[2]) >= tonumber(rec[5]) then
  set_status(KEYS[1], ARGV[1], rec[2], rec[3], rec[1], 'done', '', '', ARGV[4], ARGV[5])
  return {1, rec[4]}
end
redis.call('HSET', KEYS[1], 'updated_at', ARGV[4])
redis.call('ZADD', ARGV[1] .. 'tenant:' .. rec[2] .. ':status:' .. rec[1], ARGV[5], rec[3])
redis.call('ZADD', ARGV[1] .. 'tenant:' .. rec[2] .. ':events', ARGV[5], rec[3])
return {0}
"""
)
#: ``claim_content``: KEYS the content key; ARGV prefix, event id. Returns the event holding the content (not
#: failed), or nil when this event now holds it.
LUA_CLAIM_CONTENT = f"""
local holder = redis.call('GET', KEYS[1])
if holder and holder ~= ARGV[2] then
  local status = redis.call('HGET', ARGV[1] .. 'event:' .. holder, 'status')
  if status and status ~= '{EventStatus.failed.value}' then return holder end
end
redis.call('SET', KEYS[1], ARGV[2])
return false
"""

#: ``end_work``: KEYS the event's unfinished hash; ARGV the work. One start fewer; the field goes at zero (and the
#: hash with its last field), so an event whose work all ended keeps nothing.
LUA_END_WORK = """
if redis.call('HINCRBY', KEYS[1], ARGV[1], -1) <= 0 then redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""
