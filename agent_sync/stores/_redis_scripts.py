"""The Lua scripts of :class:`~agent_sync.stores.RedisRunStore`: every change the store
makes is one of them, so it checks (compare-and-set) and writes atomically, and reads the
server's ``TIME`` (hosts with skewed clocks agree on when a lease ran out).

:data:`SCRIPTS` maps each name the store runs to its source: the shared :data:`PRELUDE`
(server time, the key names, and ``write_state``, the one place a run's status changes)
followed by the script's body. The keys are described in :mod:`._redis`.
"""

from __future__ import annotations

from ._redis_value_scripts import VALUE_SCRIPTS

__all__ = ["CHUNK", "PRELUDE", "SCRIPTS"]

CHUNK = 500  # messages per RPUSH inside a script (Lua's unpack has a stack limit)

# Shared Lua: server time, and writing a state (the one place a run's status changes).
PRELUDE = """
local function now()
  local t = redis.call('TIME')
  return tonumber(t[1]) + tonumber(t[2]) / 1000000
end
local function fmt(x) return string.format('%.6f', x) end
local function run_key(prefix, run_id) return prefix .. 'run:' .. run_id end
local function conv_key(prefix, cid, part) return prefix .. 'conv:' .. cid .. ':' .. part end
local function events_key(prefix, run_id) return prefix .. 'events:' .. run_id end
local function complete_key(prefix, run_id) return prefix .. 'events-complete:' .. run_id end
local function signals_key(prefix, run_id) return prefix .. 'signals:' .. run_id end
local function resumable_key(prefix) return prefix .. 'resumable' end

-- Is the run (its hash's fields) running past its lease, by the server's clock?
local function past_lease(status, expires)
  return status == 'running' and expires and expires ~= '' and tonumber(expires) <= now()
end

-- What stands in the way of changing the conversation `cid` (a new run, a new log): its
-- current run, paused ('paused'), lost and waiting for a recoverer ('recovering'), running
-- past its lease with on_owner_lost "fail" ('expired': the caller fails it, then tries
-- again) or running ('busy'); nil if nothing does. Then the current run's id.
local function blocker(prefix, cid)
  local run_id = redis.call('GET', conv_key(prefix, cid, 'current'))
  if not run_id then return nil end
  local f = redis.call('HMGET', run_key(prefix, run_id), 'status', 'lease_expires_at',
                       'resumable')
  if f[1] == 'paused' then return 'paused', run_id end
  if past_lease(f[1], f[2]) then
    if f[3] == '1' then return 'recovering', run_id end
    return 'expired', run_id
  end
  if f[1] == 'running' then return 'busy', run_id end
  return nil
end

-- Keep the run in the sorted set of resumable running runs (scored by lease expiry, what
-- lost_runs reads) while it runs with on_owner_lost "resume"; out of it otherwise. `was`:
-- it may be in the set now (its stored state had on_owner_lost "resume"); a run never put
-- in it costs no ZREM.
local function index_run(prefix, run_id, was, status, resumable, expires)
  if status == 'running' and resumable == '1' then
    redis.call('ZADD', resumable_key(prefix), expires, run_id)
  elseif was then
    redis.call('ZREM', resumable_key(prefix), run_id)
  end
end

-- Store a new state of the run at `key` (version + 1); `resumable` is '1' if the state's
-- on_owner_lost is "resume". Final: write the log from history_start, free the
-- conversation, drop the signals, schedule expiry.
local function write_state(prefix, key, run_id, state, status, history_start, ttl, msgs, t,
                           resumable)
  local before = redis.call('HMGET', key, 'version', 'lease_s', 'resumable', 'conversation_id')
  local version = tonumber(before[1]) + 1
  local fields = {'state', state, 'status', status, 'version', version, 'updated_at', fmt(t),
                  'resumable', resumable}
  local expires = ''
  if status == 'running' then
    expires = fmt(t + tonumber(before[2]))
    fields[#fields + 1] = 'lease_expires_at'
    fields[#fields + 1] = expires
  else
    for _, item in ipairs({'owner', '', 'lease_expires_at', ''}) do fields[#fields + 1] = item end
    if status ~= 'paused' then
      fields[#fields + 1] = 'ended_at'
      fields[#fields + 1] = fmt(t)
    end
  end
  redis.call('HSET', key, unpack(fields))
  if status ~= 'running' and status ~= 'paused' then
    local cid = before[4]
    local log = conv_key(prefix, cid, 'log')
    if history_start == 0 then
      redis.call('DEL', log)
    else
      redis.call('LTRIM', log, 0, history_start - 1)
    end
    for i = 1, #msgs, CHUNK do
      redis.call('RPUSH', log, unpack(msgs, i, math.min(i + CHUNK - 1, #msgs)))
    end
    local current = conv_key(prefix, cid, 'current')
    if redis.call('GET', current) == run_id then redis.call('DEL', current) end
    redis.call('DEL', signals_key(prefix, run_id))
    redis.call('ZADD', prefix .. 'finished', t, run_id)
    if ttl > 0 then redis.call('EXPIRE', key, ttl) end
  end
  index_run(prefix, run_id, before[3] == '1', status, resumable, expires)
  return version
end
""".replace("CHUNK", str(CHUNK))

# ARGV: prefix, conversation_id, since. {'ok', the conversation's log from `since` on, its
# current run's fields (or nothing), the log's length, `since` as used, generation}: one
# consistent read. {'expired', run_id} if the current run is past its lease with
# on_owner_lost "fail": the caller fails it and reads again (so a read that finds nothing
# wrong, the usual case, is one round trip).
_LOAD = """
local prefix, cid = ARGV[1], ARGV[2]
local run_id = redis.call('GET', conv_key(prefix, cid, 'current'))
local run = {}
if run_id then
  run = redis.call('HMGET', run_key(prefix, run_id), 'state', 'version', 'owner',
                   'lease_expires_at', 'status', 'resumable')
  if run[6] ~= '1' and past_lease(run[5], run[4]) then return {'expired', run_id} end
end
local key = conv_key(prefix, cid, 'log')
local length = redis.call('LLEN', key)
local start = math.min(tonumber(ARGV[3]), length)
local log = redis.call('LRANGE', key, start, -1)
local generation = tonumber(redis.call('GET', conv_key(prefix, cid, 'generation')) or '0')
return {'ok', log, run, length, start, generation}
"""

# ARGV: prefix, conversation_id, messages... Replace the whole log (the user's new history)
# unless a run is current: {blocker, run_id} (see `blocker`), nothing changed; else {'ok',
# generation}.
_REPLACE = """
local prefix, cid = ARGV[1], ARGV[2]
local blocked, run_id = blocker(prefix, cid)
if blocked then return {blocked, run_id} end
local log = conv_key(prefix, cid, 'log')
redis.call('DEL', log)
for i = 3, #ARGV, CHUNK do
  redis.call('RPUSH', log, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
end
return {'ok', redis.call('INCR', conv_key(prefix, cid, 'generation'))}
""".replace("CHUNK", str(CHUNK))

# ARGV: prefix, run_id. The run's fields needed to act on it, and '1' if it is running past
# its lease with on_owner_lost "fail" (to be failed before it is shown), else '0'.
_READ = """
local key = run_key(ARGV[1], ARGV[2])
if redis.call('EXISTS', key) == 0 then return false end
local f = redis.call('HMGET', key, 'state', 'status', 'version', 'conversation_id',
                     'started_at', 'updated_at', 'lease_expires_at', 'resumable')
local expired = f[8] ~= '1' and past_lease(f[2], f[7])
return {f[1], f[2], f[3], f[4], f[5], f[6], expired and '1' or '0'}
"""

# ARGV: prefix, conversation_id, run_id, state, owner, lease_s, expected_length, resumable
# ('1': on_owner_lost "resume"). Refused as replace is, or {'length', length}, {'exists'}.
_BEGIN = """
local prefix, cid, run_id = ARGV[1], ARGV[2], ARGV[3]
local blocked, busy = blocker(prefix, cid)
if blocked then return {blocked, busy} end
local current = conv_key(prefix, cid, 'current')
local length = redis.call('LLEN', conv_key(prefix, cid, 'log'))
if length ~= tonumber(ARGV[7]) then return {'length', length} end
local key = run_key(prefix, run_id)
if redis.call('EXISTS', key) == 1 then return {'exists'} end
local t = now()
local expires = fmt(t + tonumber(ARGV[6]))
redis.call('HSET', key, 'state', ARGV[4], 'status', 'running', 'version', 1,
           'owner', ARGV[5], 'lease_s', ARGV[6], 'lease_expires_at', expires,
           'started_at', fmt(t), 'updated_at', fmt(t), 'ended_at', '',
           'conversation_id', cid, 'resumable', ARGV[8])
index_run(prefix, run_id, false, 'running', ARGV[8], expires)
redis.call('SET', current, run_id)
return {'ok', 1}
"""

# ARGV: prefix, run_id, expected version, required owner ('' = any), state, status,
# history_start, ttl, new owner ('' = keep), new lease_s ('' = keep), injects received
# ('' = not checked), resumable ('1': on_owner_lost "resume"), lost only ('1': refused
# unless the run is lost: {'notlost', status, resumable, past its lease ('1'/'0')}),
# messages... A final write while the run has accepted more injects than its owner
# received: {'injects', accepted}, nothing changed. The write drops the signals it consumes
# (the signal rule of _protocol): a running one with injects received, the injects its
# state holds (as _rules.acknowledged_injects counts them); a pause, every signal the owner
# took ('signals_taken': how many of the list's first items); a final one, all of them.
_WRITE = """
local function acknowledge(key, list, received)
  local items = redis.call('LRANGE', list, 0, -1)
  local injects = {}
  for n, item in ipairs(items) do
    if cjson.decode(item).kind == 'inject' then injects[#injects + 1] = n end
  end
  local accepted = tonumber(redis.call('HGET', key, 'injects') or '0')
  local count = math.max(0, math.min(#injects, received - (accepted - #injects)))
  if count == 0 then return end
  local dropped, kept = {}, {}
  for i = 1, count do dropped[injects[i]] = true end
  local taken = tonumber(redis.call('HGET', key, 'signals_taken') or '0')
  local still_taken = taken
  for n, item in ipairs(items) do
    if dropped[n] then
      if n <= taken then still_taken = still_taken - 1 end
    else
      kept[#kept + 1] = item
    end
  end
  redis.call('DEL', list)
  for _, item in ipairs(kept) do redis.call('RPUSH', list, item) end
  redis.call('HSET', key, 'signals_taken', still_taken)
end
local prefix, run_id = ARGV[1], ARGV[2]
local key = run_key(prefix, run_id)
local fields = redis.call('HMGET', key, 'status', 'version', 'owner')
if not fields[1] then return {'unknown'} end
if fields[1] == 'done' or fields[1] == 'cancelled' or fields[1] == 'failed' then
  return {'over', fields[1]}
end
if tonumber(fields[2]) ~= tonumber(ARGV[3]) or (ARGV[4] ~= '' and fields[3] ~= ARGV[4]) then
  return {'conflict', fields[2]}
end
if ARGV[13] == '1' then  -- a claim or cancel of a lost run: is it (still) lost?
  local f = redis.call('HMGET', key, 'resumable', 'lease_expires_at')
  local past = past_lease(fields[1], f[2])
  if not past or f[1] ~= '1' then
    return {'notlost', fields[1], f[1] or '0', past and '1' or '0'}
  end
end
local status = ARGV[6]
if ARGV[11] ~= '' and status ~= 'running' then  -- an end or a pause: its last look
  local accepted = tonumber(redis.call('HGET', key, 'injects') or '0')
  if accepted > tonumber(ARGV[11]) then return {'injects', accepted} end
end
local list = signals_key(prefix, run_id)
if ARGV[9] ~= '' then  -- a claim: the new owner takes every signal still queued
  local queued = 0
  for _, item in ipairs(redis.call('LRANGE', list, 0, -1)) do
    if cjson.decode(item).kind == 'inject' then queued = queued + 1 end
  end
  redis.call('HSET', key, 'owner', ARGV[9], 'lease_s', ARGV[10], 'injects', queued,
             'signals_taken', 0)
elseif status == 'paused' then  -- the pause consumes every signal its owner took
  local taken = tonumber(redis.call('HGET', key, 'signals_taken') or '0')
  if taken > 0 then redis.call('LTRIM', list, taken, -1) end
  redis.call('HSET', key, 'signals_taken', 0)
elseif status == 'running' and ARGV[11] ~= '' then
  acknowledge(key, list, tonumber(ARGV[11]))
end
local msgs = {}
for i = 14, #ARGV do msgs[#msgs + 1] = ARGV[i] end
local version = write_state(prefix, key, run_id, ARGV[5], ARGV[6], tonumber(ARGV[7]),
                            tonumber(ARGV[8]), msgs, now(), ARGV[12])
return {'ok', version}
"""

# ARGV: prefix, run_id, owner, lease_s.
_RENEW = """
local key = run_key(ARGV[1], ARGV[2])
local fields = redis.call('HMGET', key, 'status', 'owner', 'resumable')
if fields[1] ~= 'running' or fields[2] ~= ARGV[3] then return 0 end
local expires = fmt(now() + tonumber(ARGV[4]))
redis.call('HSET', key, 'lease_s', ARGV[4], 'lease_expires_at', expires)
index_run(ARGV[1], ARGV[2], fields[3] == '1', 'running', fields[3], expires)
return 1
"""

# ARGV: prefix, run_id, kind, payload (JSON), channel. Queue a signal for a running run's owner and
# wake the watchers. Otherwise say why not: {'unknown'}, {'over'}, {'expired', conversation}
# (its owner's lease ran out: it fails), {'paused', version, state} or {'lost', version,
# state} (a cancel applies at once). An inject into a lost run is queued (its new owner
# takes it).
_SIGNAL = """
local prefix, run_id = ARGV[1], ARGV[2]
local key = run_key(prefix, run_id)
local fields = redis.call('HMGET', key, 'status', 'lease_expires_at', 'conversation_id',
                          'version', 'resumable')
local status = fields[1]
if not status then return {'unknown'} end
if status == 'paused' then return {'paused', fields[4], redis.call('HGET', key, 'state')} end
if status ~= 'running' then return {'over'} end
if past_lease(status, fields[2]) then
  if fields[5] ~= '1' then return {'expired', fields[3]} end
  if ARGV[3] == 'cancel' then return {'lost', fields[4], redis.call('HGET', key, 'state')} end
end
local seq = redis.call('INCR', prefix .. 'signal-seq')
if ARGV[3] == 'inject' then redis.call('HINCRBY', key, 'injects', 1) end
redis.call('RPUSH', signals_key(prefix, run_id),
           cjson.encode({seq = seq, kind = ARGV[3], payload = ARGV[4]}))
redis.call('PUBLISH', ARGV[5], run_id)
return {'queued'}
"""

# ARGV: prefix, run ids... Take the queued signals of these runs their owners have not
# taken (after the first 'signals_taken' items of each list, moved on): they stay queued
# until the commit that consumes them (_WRITE). A run whose hash is gone has its list taken.
_TAKE = """
local prefix = ARGV[1]
local taken = {}
for i = 2, #ARGV do
  local key, run = signals_key(prefix, ARGV[i]), run_key(prefix, ARGV[i])
  local before = tonumber(redis.call('HGET', run, 'signals_taken') or '0')
  local items = redis.call('LRANGE', key, before, -1)
  if #items > 0 then
    if redis.call('EXISTS', run) == 1 then
      redis.call('HSET', run, 'signals_taken', before + #items)
    else
      redis.call('DEL', key)
    end
    for _, item in ipairs(items) do taken[#taken + 1] = ARGV[i]; taken[#taken + 1] = item end
  end
end
return taken
"""

# ARGV: prefix, run_id, after, open_ttl_ms (0: none), keep_ms ('': not complete; -1: for
# ever), events (JSON)... Append the events numbered after + 1, ... if the log ends at `after`
# and is not complete: {'ok', last}; else {'complete'} or {'moved', last}, nothing changed.
_APPEND = """
local prefix, run_id = ARGV[1], ARGV[2]
local key, complete = events_key(prefix, run_id), complete_key(prefix, run_id)
if redis.call('EXISTS', complete) == 1 then return {'complete'} end
local last = redis.call('XLEN', key)
if last ~= tonumber(ARGV[3]) then return {'moved', last} end
for i = 6, #ARGV do
  last = last + 1
  redis.call('XADD', key, string.format('%d-0', last), 'd', ARGV[i])
end
local keep = ARGV[5]
if keep ~= '' then
  redis.call('SET', complete, '1')
  if tonumber(keep) >= 0 then
    redis.call('PEXPIRE', complete, keep)
    redis.call('PEXPIRE', key, keep)
  else
    redis.call('PERSIST', key)
  end
elseif #ARGV >= 6 and tonumber(ARGV[4]) > 0 then
  redis.call('PEXPIRE', key, ARGV[4])
end
return {'ok', last}
"""

# ARGV: prefix, older_than, events too ('1': the runs' event logs live under this prefix).
# Remove runs that ended more than older_than seconds ago: {removed, run ids...} (how many
# runs were still stored; every id taken off the set, whose keys elsewhere go too).
_PRUNE = """
local prefix = ARGV[1]
local cutoff = now() - tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', prefix .. 'finished', '-inf', cutoff)
local reply = {0}
for _, run_id in ipairs(old) do
  local key = run_key(prefix, run_id)
  reply[1] = reply[1] + redis.call('DEL', key)
  reply[#reply + 1] = run_id
  redis.call('DEL', signals_key(prefix, run_id))
  if ARGV[3] == '1' then
    redis.call('DEL', events_key(prefix, run_id), complete_key(prefix, run_id))
  end
  redis.call('ZREM', prefix .. 'finished', run_id)
  redis.call('ZREM', resumable_key(prefix), run_id)
end
return reply
"""

# ARGV: prefix, limit ('': all). The lost runs (running, resumable, past their lease by the
# server's clock), longest expired first: for each, its run id, state, version, owner,
# lease expiry and conversation. One range read of the sorted set when there are none.
_LOST = """
local prefix = ARGV[1]
local index = resumable_key(prefix)
local ids
if ARGV[2] == '' then
  ids = redis.call('ZRANGEBYSCORE', index, '-inf', fmt(now()))
else
  ids = redis.call('ZRANGEBYSCORE', index, '-inf', fmt(now()), 'LIMIT', 0, tonumber(ARGV[2]))
end
local found = {}
for _, run_id in ipairs(ids) do
  local f = redis.call('HMGET', run_key(prefix, run_id), 'state', 'version', 'owner',
                       'lease_expires_at', 'conversation_id', 'status', 'resumable')
  if f[6] == 'running' and f[7] == '1' then
    found[#found + 1] = {run_id, f[1], f[2], f[3], f[4], f[5]}
  else  -- never left behind (the scripts keep the set in step; this heals, not decides)
    redis.call('ZREM', index, run_id)
  end
end
return found
"""


SCRIPTS: dict[str, str] = {
    name: PRELUDE + body
    for name, body in (
        ("load", _LOAD),
        ("replace", _REPLACE),
        ("read", _READ),
        ("begin", _BEGIN),
        ("write", _WRITE),
        ("renew", _RENEW),
        ("signal", _SIGNAL),
        ("take", _TAKE),
        ("append", _APPEND),
        ("prune", _PRUNE),
        ("lost", _LOST),
        *VALUE_SCRIPTS,
    )
}
"""The source of each script, by the name the store runs it under."""
