"""The Lua scripts of the conversations' values of :class:`~agent_sync.stores.RedisRunStore`
(:mod:`._redis_values`), run after :data:`._redis_scripts.PRELUDE` like every other.

A conversation's values are the fields of one hash, ``conv:{id}:values`` under the
conversation's prefix (its shard on a Redis Cluster, with its log and runs), so each script
touches one key of the conversation's slot, and a compare-and-set is atomic (a script runs
whole, alone).
"""

from __future__ import annotations

__all__ = ["VALUE_SCRIPTS"]

# ARGV: prefix, conversation_id, key. The value, or false.
_GET_VALUE = """
return redis.call('HGET', conv_key(ARGV[1], ARGV[2], 'values'), ARGV[3])
"""

# ARGV: prefix, conversation_id, key, expected ('' with has_expected '0': absent),
# has_expected, value, has_value ('0': delete). 1 if it was `expected` (and is now `value`),
# else 0 and nothing changed. A hash left empty is gone (Redis drops it).
_SET_VALUE = """
local key = conv_key(ARGV[1], ARGV[2], 'values')
local current = redis.call('HGET', key, ARGV[3])
if ARGV[5] == '1' then
  if current ~= ARGV[4] then return 0 end
elseif current then
  return 0
end
if ARGV[7] == '1' then
  redis.call('HSET', key, ARGV[3], ARGV[6])
elseif current then
  redis.call('HDEL', key, ARGV[3])
end
return 1
"""

VALUE_SCRIPTS: tuple[tuple[str, str], ...] = (("get_value", _GET_VALUE), ("set_value", _SET_VALUE))
"""The scripts' names and bodies."""
