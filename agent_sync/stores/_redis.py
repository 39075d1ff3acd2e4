""":class:`RedisRunStore`: the run store for several hosts (redis-py; the ``redis`` extra).

Design:

* The user passes the ``redis.Redis`` client, so redis-py's own options (TLS, ACL user and
  password, Sentinel, timeouts, pools) are theirs to set; the store never logs or shows it.
* Keys, under a configurable prefix (``agent_sync:`` by default)::

      {prefix}run:{run_id}            hash: state, status, version, owner, lease, times,
                                      injects (how many inputs inject() accepted)
      {prefix}signals:{run_id}        list: the run's queued cancel/inject signals
      {prefix}conv:{id}:log           list: the conversation's messages (JSON), in order
      {prefix}conv:{id}:current       string: the run id of its running or paused run
      {prefix}conv:{id}:generation    integer: how many times the log was replaced
      {prefix}finished                sorted set: finished runs by end time (``prune``)
      {prefix}signals                 pub/sub channel: "a signal is queued for run X"
      {prefix}events:{run_id}         stream: the run's event log, entry ids "<number>-0"
      {prefix}events-complete:{run_id}  string: set once the run's event log is complete

  Each kind of key has its own word before the id, and no word is another's prefix up to
  its ``:``, so no id (``"<run id>:signals"``, say) names a key of another kind or run.

* Every change is one Lua script: it checks the version (compare-and-set) and writes, so
  two processes racing never both win. Time (leases, end times) is the Redis server's
  ``TIME``, so hosts with skewed clocks agree on when a lease ran out.
* Ending a turn trims the log to ``history_start`` and pushes the run's messages: its cost
  does not grow with the conversation.
* Signals are a list per run plus a ``PUBLISH`` on one channel; ``wait_signals`` listens on
  that channel (one pub/sub connection per store object) and takes a run's list atomically,
  so a signal is delivered once, in order, and never lost between a look and a wait.
* A run's event log is a stream whose entry ids are the events' numbers (``7-0`` is event 7;
  nothing is ever deleted from it, so its length is its last number). One script appends:
  it checks the complete mark and the length (compare-and-set), ``XADD`` s the batch and
  sets the expiry: ``finished_ttl_s`` from the last append while the log is open, and
  ``keep_s`` for it and its complete mark once complete. ``read_events`` reads with
  ``XRANGE`` and waits with ``XREAD BLOCK`` (at most ``_BLOCK_S`` per call, well within the
  client's socket timeout), so an append from any process wakes it at once. A wait with
  nothing to read may end up to 0.1 s past its timeout (Redis ends a block on its next timer
  tick); a client whose socket timeout is under about 0.25 s cannot block, and polls.
* A finished run's keys expire after ``finished_ttl_s`` (``prune`` removes them sooner);
  conversation logs never expire.
* Every redis-py failure (connection refused, timeout, a server that says no) becomes
  :class:`~agent_sync.errors.StoreUnavailableError`: a script either ran whole or not at all,
  so nothing changed (fail closed).

Keys of one run and of its conversation are used together in scripts, so the store needs
one Redis server (or a primary with replicas), not Redis Cluster.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
from collections.abc import Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .._prompt import content_blocks
from .._run_state import RunSnapshot, RunState
from ..cancel import CancelMode, check_mode
from ..errors import (
    RunConflictError,
    StoreUnavailableError,
    UsageError,
)
from ..messages import ContentBlock, Message
from ._event_log import RunEvent
from ._protocol import ConversationRecord, RunSignal, StoredRun
from ._rules import (
    FINAL_STATUSES,
    abandoned,
    bad_conversation_id,
    cancelled_while_paused,
    check_reason,
    conversation_busy,
    conversation_paused,
    decode_event,
    decode_messages,
    decode_state,
    encode_events,
    encode_messages,
    encode_state,
    events_complete,
    events_moved_on,
    input_pending,
    log_moved_on,
    moved_on,
    not_paused,
    not_running,
    run_exists,
    snapshot_of,
    stale_write,
    storable_id,
)

if TYPE_CHECKING:
    import redis

__all__ = ["RedisRunStore"]

_POLL_S = 0.005  # wait_signals, when another thread of this store holds the pub/sub
_CHUNK = 500  # messages per RPUSH inside a script (Lua's unpack has a stack limit)
_CAS_ATTEMPTS = 20  # cancel of a paused run racing other writers
_BLOCK_S = 1.0  # read_events: the longest XREAD BLOCK (then it blocks again, to its timeout)
_TICK_S = 0.1  # how late Redis may end a BLOCK: it checks timeouts every 1 / hz (10) seconds
_EVENT_POLL_S = 0.02  # read_events through a client whose socket timeout is too short to block
_KEEP_FOR_EVER_S = 1e12  # a keep_s this long (31,000 years) sets no expiry (PEXPIRE overflows)

# Shared Lua: server time, and writing a state (the one place a run's status changes).
_PRELUDE = """
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

-- Store a new state of the run at `key` (version + 1). Final: write the log from
-- history_start, free the conversation, drop the signals, schedule expiry.
local function write_state(prefix, key, run_id, state, status, history_start, ttl, msgs, t)
  local version = tonumber(redis.call('HGET', key, 'version')) + 1
  redis.call('HSET', key, 'state', state, 'status', status, 'version', version,
             'updated_at', fmt(t))
  if status == 'running' then
    local lease = tonumber(redis.call('HGET', key, 'lease_s'))
    redis.call('HSET', key, 'lease_expires_at', fmt(t + lease))
  elseif status == 'paused' then
    redis.call('HSET', key, 'owner', '', 'lease_expires_at', '')
  else
    local cid = redis.call('HGET', key, 'conversation_id')
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
    redis.call('HSET', key, 'owner', '', 'lease_expires_at', '', 'ended_at', fmt(t))
    redis.call('DEL', signals_key(prefix, run_id))
    redis.call('ZADD', prefix .. 'finished', t, run_id)
    if ttl > 0 then redis.call('EXPIRE', key, ttl) end
  end
  return version
end
""".replace("CHUNK", str(_CHUNK))

# ARGV: prefix, conversation_id, since. The conversation's log from `since` on, its current
# run's fields (or nothing), and the log's length: one consistent read.
_LOAD = """
local prefix, cid = ARGV[1], ARGV[2]
local key = conv_key(prefix, cid, 'log')
local length = redis.call('LLEN', key)
local start = math.min(tonumber(ARGV[3]), length)
local log = redis.call('LRANGE', key, start, -1)
local run_id = redis.call('GET', conv_key(prefix, cid, 'current'))
local run = {}
if run_id then
  run = redis.call('HMGET', run_key(prefix, run_id), 'state', 'version', 'owner',
                   'lease_expires_at', 'status')
end
local generation = tonumber(redis.call('GET', conv_key(prefix, cid, 'generation')) or '0')
return {log, run, length, start, generation}
"""

# ARGV: prefix, conversation_id, messages... Replace the whole log (the user's new history)
# unless a run is current: {'paused'} / {'busy'}, nothing changed; else {'ok', generation}.
_REPLACE = """
local prefix, cid = ARGV[1], ARGV[2]
local busy = redis.call('GET', conv_key(prefix, cid, 'current'))
if busy then
  local status = redis.call('HGET', run_key(prefix, busy), 'status')
  if status == 'paused' then return {'paused'} end
  if status == 'running' then return {'busy'} end
end
local log = conv_key(prefix, cid, 'log')
redis.call('DEL', log)
for i = 3, #ARGV, CHUNK do
  redis.call('RPUSH', log, unpack(ARGV, i, math.min(i + CHUNK - 1, #ARGV)))
end
return {'ok', redis.call('INCR', conv_key(prefix, cid, 'generation'))}
""".replace("CHUNK", str(_CHUNK))

# ARGV: prefix, run_id. The run's fields needed to act on it.
_READ = """
local key = run_key(ARGV[1], ARGV[2])
if redis.call('EXISTS', key) == 0 then return false end
return redis.call('HMGET', key, 'state', 'status', 'version', 'conversation_id',
                  'started_at', 'updated_at')
"""

# ARGV: prefix, conversation_id. Is its current run running past its lease? (run id or nil)
_EXPIRED = """
local prefix, cid = ARGV[1], ARGV[2]
local run_id = redis.call('GET', conv_key(prefix, cid, 'current'))
if not run_id then return false end
local fields = redis.call('HMGET', run_key(prefix, run_id), 'status', 'lease_expires_at')
if fields[1] ~= 'running' or not fields[2] or fields[2] == '' then return false end
if tonumber(fields[2]) > now() then return false end
return run_id
"""

# ARGV: prefix, conversation_id, run_id, state, owner, lease_s, expected_length.
_BEGIN = """
local prefix, cid, run_id = ARGV[1], ARGV[2], ARGV[3]
local current = conv_key(prefix, cid, 'current')
local busy = redis.call('GET', current)
if busy then
  local status = redis.call('HGET', run_key(prefix, busy), 'status')
  if status == 'paused' then return {'paused'} end
  if status == 'running' then return {'busy'} end
end
local length = redis.call('LLEN', conv_key(prefix, cid, 'log'))
if length ~= tonumber(ARGV[7]) then return {'length', length} end
local key = run_key(prefix, run_id)
if redis.call('EXISTS', key) == 1 then return {'exists'} end
local t = now()
local lease = tonumber(ARGV[6])
redis.call('HSET', key, 'state', ARGV[4], 'status', 'running', 'version', 1,
           'owner', ARGV[5], 'lease_s', ARGV[6], 'lease_expires_at', fmt(t + lease),
           'started_at', fmt(t), 'updated_at', fmt(t), 'ended_at', '',
           'conversation_id', cid)
redis.call('SET', current, run_id)
return {'ok', 1}
"""

# ARGV: prefix, run_id, expected version, required owner ('' = any), state, status,
# history_start, ttl, new owner ('' = keep), new lease_s ('' = keep), injects received
# ('' = not checked), messages... A final write while the run has accepted more injects
# than its owner received: {'injects', accepted}, nothing changed.
_WRITE = """
local prefix, run_id = ARGV[1], ARGV[2]
local key = run_key(prefix, run_id)
if redis.call('EXISTS', key) == 0 then return {'unknown'} end
local fields = redis.call('HMGET', key, 'status', 'version', 'owner')
if fields[1] == 'done' or fields[1] == 'cancelled' or fields[1] == 'failed' then
  return {'over', fields[1]}
end
if tonumber(fields[2]) ~= tonumber(ARGV[3]) or (ARGV[4] ~= '' and fields[3] ~= ARGV[4]) then
  return {'conflict', fields[2]}
end
local status = ARGV[6]
if ARGV[11] ~= '' and status ~= 'running' then  -- an end or a pause: its last look
  local accepted = tonumber(redis.call('HGET', key, 'injects') or '0')
  if accepted > tonumber(ARGV[11]) then return {'injects', accepted} end
end
if ARGV[9] ~= '' then  -- a claim: the new owner receives the injects still queued
  local queued = 0
  for _, item in ipairs(redis.call('LRANGE', signals_key(prefix, run_id), 0, -1)) do
    if cjson.decode(item).kind == 'inject' then queued = queued + 1 end
  end
  redis.call('HSET', key, 'owner', ARGV[9], 'lease_s', ARGV[10], 'injects', queued)
end
local msgs = {}
for i = 12, #ARGV do msgs[#msgs + 1] = ARGV[i] end
local version = write_state(prefix, key, run_id, ARGV[5], ARGV[6], tonumber(ARGV[7]),
                            tonumber(ARGV[8]), msgs, now())
return {'ok', version}
"""

# ARGV: prefix, run_id, owner, lease_s.
_RENEW = """
local key = run_key(ARGV[1], ARGV[2])
local fields = redis.call('HMGET', key, 'status', 'owner')
if fields[1] ~= 'running' or fields[2] ~= ARGV[3] then return 0 end
redis.call('HSET', key, 'lease_s', ARGV[4], 'lease_expires_at', fmt(now() + tonumber(ARGV[4])))
return 1
"""

# ARGV: prefix, run_id, kind, payload (JSON). Queue a signal for a running run's owner and
# wake the watchers. Otherwise say why not: {'unknown'}, {'over'}, {'expired', conversation}
# (its owner's lease ran out), {'paused', version, state} (a cancel applies at once).
_SIGNAL = """
local prefix, run_id = ARGV[1], ARGV[2]
local key = run_key(prefix, run_id)
local fields = redis.call('HMGET', key, 'status', 'lease_expires_at', 'conversation_id',
                          'version')
local status = fields[1]
if not status then return {'unknown'} end
if status == 'paused' then return {'paused', fields[4], redis.call('HGET', key, 'state')} end
if status ~= 'running' then return {'over'} end
if fields[2] and fields[2] ~= '' and tonumber(fields[2]) <= now() then
  return {'expired', fields[3]}
end
local seq = redis.call('INCR', prefix .. 'signal-seq')
if ARGV[3] == 'inject' then redis.call('HINCRBY', key, 'injects', 1) end
redis.call('RPUSH', signals_key(prefix, run_id),
           cjson.encode({seq = seq, kind = ARGV[3], payload = ARGV[4]}))
redis.call('PUBLISH', prefix .. 'signals', run_id)
return {'queued'}
"""

# ARGV: prefix, run ids... Take (read and delete) the queued signals of these runs.
_TAKE = """
local prefix = ARGV[1]
local taken = {}
for i = 2, #ARGV do
  local key = signals_key(prefix, ARGV[i])
  local items = redis.call('LRANGE', key, 0, -1)
  if #items > 0 then
    redis.call('DEL', key)
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

# ARGV: prefix, older_than. Remove runs that ended more than older_than seconds ago.
_PRUNE = """
local prefix = ARGV[1]
local cutoff = now() - tonumber(ARGV[2])
local old = redis.call('ZRANGEBYSCORE', prefix .. 'finished', '-inf', cutoff)
local removed = 0
for _, run_id in ipairs(old) do
  local key = run_key(prefix, run_id)
  removed = removed + redis.call('DEL', key)
  redis.call('DEL', signals_key(prefix, run_id), events_key(prefix, run_id),
             complete_key(prefix, run_id))
  redis.call('ZREM', prefix .. 'finished', run_id)
end
return removed
"""


class RedisRunStore:
    """A :class:`~agent_sync.stores.RunStore` on a Redis server, for processes on many hosts.

    Args:
        client: A ``redis.Redis`` client (``decode_responses`` either way). TLS, ACLs and
            timeouts are set on it; the store never shows it in logs, errors or reprs.
        prefix: Put before every key and the channel name (several apps, one server).
        lease_s: The lease agents on this store use by default (seconds).
        finished_ttl_s: Seconds a finished run (its state, for ``get``) is kept before
            Redis expires it; ``None`` keeps it until :meth:`prune`.

    Raises:
        UsageError: Not a ``redis.Redis`` client (a URL: pass ``redis.Redis.from_url(url)``),
            an empty prefix, or a non-positive lease or TTL.
    """

    def __init__(
        self,
        client: redis.Redis,
        *,
        prefix: str = "agent_sync:",
        lease_s: float = 30.0,
        finished_ttl_s: float | None = 7 * 24 * 3600,
    ) -> None:
        if not callable(getattr(client, "register_script", None)):
            raise UsageError(  # never the value: a URL may hold a password
                "RedisRunStore takes a redis.Redis client, not a "
                f"{type(client).__name__}: for a URL, pass redis.Redis.from_url(url)"
            )
        if not prefix:
            raise UsageError("prefix must not be empty: it keeps the store's keys apart")
        if not lease_s > 0:
            raise UsageError("lease_s must be positive (seconds)")
        if finished_ttl_s is not None and not finished_ttl_s >= 1:
            raise UsageError("finished_ttl_s must be at least 1 second, or None")
        self.prefix = prefix
        self.lease_s = lease_s
        self._ttl = 0 if finished_ttl_s is None else int(finished_ttl_s)
        self._client = client
        self._channel = f"{prefix}signals"
        self._scripts = {
            name: client.register_script(_PRELUDE + body)
            for name, body in (
                ("load", _LOAD),
                ("replace", _REPLACE),
                ("read", _READ),
                ("expired", _EXPIRED),
                ("begin", _BEGIN),
                ("write", _WRITE),
                ("renew", _RENEW),
                ("signal", _SIGNAL),
                ("take", _TAKE),
                ("append", _APPEND),
                ("prune", _PRUNE),
            )
        }
        self._listener_lock = threading.Lock()
        self._pubsub: Any = None
        self._pid = os.getpid()

    def __repr__(self) -> str:
        return f"<RedisRunStore prefix={self.prefix!r}>"

    def close(self) -> None:
        """Close the pub/sub connection (the client is the caller's to close)."""
        with self._listener_lock:
            self._drop_listener()

    # -- conversations and runs --

    def load(self, conversation_id: str, *, since: int = 0) -> ConversationRecord:
        if not storable_id(conversation_id):
            return ConversationRecord(
                conversation_id=conversation_id, messages=(), run=None, length=0
            )
        self._expire(conversation_id)
        log, run, length, start, generation = self._run(
            "load", self.prefix, conversation_id, max(0, int(since))
        )
        stored = None
        if run:
            state, version, owner, expires, _status = (_text(v) for v in run)
            stored = StoredRun(
                state=decode_state(state),
                version=int(version),
                owner=owner or None,
                lease_expires_at=float(expires) if expires else None,
                conversation_id=conversation_id,
            )
        return ConversationRecord(
            conversation_id=conversation_id,
            messages=tuple(decode_messages([_text(item) for item in log])),
            run=stored,
            start=int(start),
            length=int(length),
            generation=int(generation),
        )

    def replace_log(self, conversation_id: str, messages: Sequence[Message]) -> int:
        if not storable_id(conversation_id):
            raise bad_conversation_id(conversation_id)
        texts = encode_messages(messages)
        self._expire(conversation_id)
        reply = self._run("replace", self.prefix, conversation_id, *texts)
        outcome = _text(reply[0])
        if outcome == "paused":
            raise conversation_paused(conversation_id)
        if outcome == "busy":
            raise conversation_busy(conversation_id)
        return int(reply[1])

    def begin(
        self,
        conversation_id: str,
        state: RunState,
        *,
        owner: str,
        lease_s: float,
        expected_length: int,
    ) -> int:
        if not storable_id(conversation_id):
            raise bad_conversation_id(conversation_id)
        self._expire(conversation_id)
        reply = self._run(
            "begin",
            self.prefix,
            conversation_id,
            state.run_id,
            encode_state(state),
            owner,
            repr(float(lease_s)),
            expected_length,
        )
        outcome = _text(reply[0])
        if outcome == "ok":
            return 1
        if outcome == "paused":
            raise conversation_paused(conversation_id)
        if outcome == "busy":
            raise conversation_busy(conversation_id)
        if outcome == "length":
            raise log_moved_on(conversation_id, int(reply[1]), expected_length)
        raise run_exists(state.run_id)

    def commit(
        self,
        state: RunState,
        *,
        owner: str,
        version: int,
        injects_received: int | None = None,
    ) -> int:
        return self._write(state, version=version, owner=owner, injects=injects_received)

    def claim(self, run_id: str, *, owner: str, lease_s: float, version: int) -> int:
        fields = self._read(run_id)
        if fields is None or int(fields["version"]) != version:
            raise stale_write(run_id, f"not at version {version}")
        state = decode_state(fields["state"])
        if state.status != "paused":
            raise not_paused(run_id, state.status)
        return self._write(
            replace(state, status="running"), version=version, new_owner=owner, lease_s=lease_s
        )

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        return bool(self._run("renew", self.prefix, run_id, owner, repr(float(lease_s))))

    def get(self, run_id: str) -> RunSnapshot | None:
        if not storable_id(run_id):
            return None
        fields = self._read(run_id)
        if fields is None:
            return None
        if self._expire(fields["conversation_id"]):
            fields = self._read(run_id)
            if fields is None:
                return None
        return snapshot_of(
            decode_state(fields["state"]),
            started_at=float(fields["started_at"]),
            updated_at=float(fields["updated_at"]),
        )

    # -- signals --

    def cancel(self, run_id: str, reason: str | None = None, *, mode: CancelMode = "now") -> bool:
        reason = check_reason(reason)
        payload = json.dumps({"reason": reason, "mode": check_mode(mode)})
        if not storable_id(run_id):
            return False
        for _ in range(_CAS_ATTEMPTS):
            reply = self._run("signal", self.prefix, run_id, "cancel", payload)
            outcome = _text(reply[0])
            if outcome == "queued":
                return True
            if outcome == "expired":  # its owner died: fail it, then look again
                self._expire(_text(reply[1]))
                continue
            if outcome != "paused":
                return False  # unknown, or over
            state = cancelled_while_paused(decode_state(_text(reply[2])), reason)
            try:
                self._write(state, version=int(_text(reply[1])))
            except RunConflictError:
                continue  # resumed or cancelled meanwhile: look again
            return True
        raise StoreUnavailableError(f"run {run_id!r} kept changing while it was cancelled")

    def inject(self, run_id: str, content: Sequence[ContentBlock] | str) -> None:
        blocks = content_blocks(content, what="injected input")  # checked at the edge
        (text,) = encode_messages([{"role": "user", "content": blocks}])
        if not storable_id(run_id):
            raise not_running(run_id)
        reply = self._run("signal", self.prefix, run_id, "inject", text)
        if _text(reply[0]) != "queued":
            raise not_running(run_id)

    def wait_signals(self, run_ids: Collection[str], timeout: float) -> list[RunSignal]:
        deadline = time.monotonic() + max(0.0, timeout)
        if self._pid != os.getpid():  # forked: the parent's pub/sub and lock are not ours
            self._listener_lock, self._pubsub, self._pid = threading.Lock(), None, os.getpid()
        if not self._listener_lock.acquire(blocking=False):
            return self._poll_signals(run_ids, deadline)  # another thread listens
        try:
            listener = self._listener()
            while True:
                wanted = list(run_ids)  # read again at each wake: it may have grown
                taken = self._take(wanted) if wanted else []  # after subscribing: none missed
                remaining = deadline - time.monotonic()
                if taken or remaining <= 0:
                    return taken
                self._wait_for(listener, run_ids, deadline)
        finally:
            self._listener_lock.release()

    # -- event logs --

    def append_events(
        self,
        run_id: str,
        events: Sequence[dict[str, Any]],
        *,
        after: int,
        keep_s: float | None = None,
    ) -> int:
        texts = encode_events(events, after, keep_s)
        keep_ms = "" if keep_s is None else str(_keep_ms(keep_s))
        reply = self._run("append", self.prefix, run_id, after, self._ttl * 1000, keep_ms, *texts)
        outcome = _text(reply[0])
        if outcome == "ok":
            return int(reply[1])
        if outcome == "complete":
            raise events_complete(run_id)
        raise events_moved_on(run_id, int(reply[1]), after)

    def read_events(self, run_id: str, *, after: int = 0, timeout: float = 0.0) -> list[RunEvent]:
        deadline = time.monotonic() + max(0.0, timeout)
        if not storable_id(run_id):
            return []
        key = f"{self.prefix}events:{run_id}"
        start = max(0, after)
        client: Any = self._client  # redis-py's stream commands are loosely typed
        block_s = self._block_s()
        pause = threading.Event()
        with self._translated():
            events = _events(client.xrange(key, min=f"{start + 1}-0", max="+"))
            while not events:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                if block_s is None:  # a socket timeout too short to block: poll
                    pause.wait(min(_EVENT_POLL_S, remaining))
                    events = _events(client.xrange(key, min=f"{start + 1}-0", max="+"))
                    continue
                block_ms = max(1, int(min(remaining, block_s) * 1000))
                reply = client.xread({key: f"{start}-0"}, block=block_ms)
                events = _events(_read_entries(reply))
        return events

    def prune(self, *, older_than: float) -> int:
        return int(self._run("prune", self.prefix, repr(float(older_than))))

    # -- helpers --

    def _write(
        self,
        state: RunState,
        *,
        version: int,
        owner: str = "",
        new_owner: str = "",
        lease_s: float | None = None,
        injects: int | None = None,
    ) -> int:
        messages = encode_messages(state.messages) if state.status in FINAL_STATUSES else []
        reply = self._run(
            "write",
            self.prefix,
            state.run_id,
            version,
            owner,
            encode_state(state),
            state.status,
            state.history_start,
            self._ttl,
            new_owner,
            "" if lease_s is None else repr(float(lease_s)),
            "" if injects is None else int(injects),
            *messages,
        )
        outcome = _text(reply[0])
        if outcome == "ok":
            return int(reply[1])
        if outcome == "unknown":
            raise stale_write(state.run_id, "unknown run")
        if outcome == "over":
            raise stale_write(state.run_id, f"the run is over ({_text(reply[1])})")
        if outcome == "injects":
            raise input_pending(state.run_id, int(_text(reply[1])), int(injects or 0))
        raise stale_write(state.run_id, moved_on(int(_text(reply[1])), version))

    def _read(self, run_id: str) -> dict[str, str] | None:
        reply = self._run("read", self.prefix, run_id)
        if not reply:
            return None
        names = ("state", "status", "version", "conversation_id", "started_at", "updated_at")
        return {name: _text(value) for name, value in zip(names, reply, strict=True)}

    def _expire(self, conversation_id: str) -> bool:
        """Fail the conversation's running run if its lease ran out; ``True`` if it did."""
        run_id = self._run("expired", self.prefix, conversation_id)
        if not run_id:
            return False
        fields = self._read(_text(run_id))
        if fields is None or fields["status"] != "running":
            return True  # someone else acted on it meanwhile
        try:
            self._write(abandoned(decode_state(fields["state"])), version=int(fields["version"]))
        except RunConflictError:
            pass  # its owner committed, or another reader failed it first
        return True

    def _take(self, run_ids: list[str]) -> list[RunSignal]:
        flat = self._run("take", self.prefix, *run_ids)
        items = []
        for n in range(0, len(flat), 2):
            run_id = _text(flat[n])
            data = json.loads(_text(flat[n + 1]))
            items.append((int(data["seq"]), run_id, data))
        signals = []
        for _, run_id, data in sorted(items, key=lambda item: item[0]):
            payload = data["payload"]
            if data["kind"] == "cancel":
                asked = json.loads(payload)
                signals.append(
                    RunSignal(
                        run_id=run_id,
                        kind="cancel",
                        reason=asked["reason"],
                        mode=asked.get("mode", "now"),
                    )
                )
            else:
                blocks = tuple(decode_messages([payload])[0]["content"])
                signals.append(RunSignal(run_id=run_id, kind="inject", content=blocks))
        return signals

    def _poll_signals(self, run_ids: Collection[str], deadline: float) -> list[RunSignal]:
        pause = threading.Event()
        while True:
            wanted = list(run_ids)
            taken = self._take(wanted) if wanted else []
            remaining = deadline - time.monotonic()
            if taken or remaining <= 0:
                return taken
            pause.wait(min(_POLL_S, remaining))

    def _listener(self) -> Any:
        """The subscribed pub/sub connection (under ``_listener_lock``)."""
        if self._pubsub is None:
            client: Any = self._client  # redis-py's pubsub() is untyped
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            with self._translated():
                pubsub.subscribe(self._channel)
            self._pubsub = pubsub
        return self._pubsub

    def _wait_for(self, listener: Any, wanted: Collection[str], deadline: float) -> None:
        """Wait until a signal for one of ``wanted`` is published, or the deadline."""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                with self._translated():
                    message = listener.get_message(timeout=remaining)
            except StoreUnavailableError:
                self._drop_listener()
                raise
            if message is not None and _text(message.get("data")) in wanted:
                return

    def _drop_listener(self) -> None:
        if self._pubsub is not None:
            try:
                self._pubsub.close()
            except Exception:  # noqa: BLE001 - closing a broken connection
                pass
            self._pubsub = None

    def _block_s(self) -> float | None:
        """The longest ``XREAD BLOCK``: :data:`_BLOCK_S`, or less if the client's socket
        timeout is short (a reply later than it reads as a dead server); ``None`` if it is
        too short to block at all. Redis ends a block on its next timer tick, up to
        :data:`_TICK_S` late, so that is kept in hand."""
        pool = getattr(self._client, "connection_pool", None)
        options = getattr(pool, "connection_kwargs", None)
        socket_timeout = options.get("socket_timeout") if isinstance(options, dict) else None
        if not isinstance(socket_timeout, (int, float)) or socket_timeout <= 0:
            return _BLOCK_S
        block_s = min(_BLOCK_S, socket_timeout / 2 - _TICK_S)
        return block_s if block_s >= 0.01 else None

    def _run(self, name: str, *args: Any) -> Any:
        with self._translated():
            return self._scripts[name](args=list(args))

    @contextmanager
    def _translated(self) -> Iterator[None]:
        """redis-py failures -> StoreUnavailableError (redis-py's messages name the
        server and the failure, never a password)."""
        import redis as redis_module

        try:
            yield
        except redis_module.RedisError as exc:
            raise StoreUnavailableError(
                f"the Redis store is unavailable ({type(exc).__name__}: {exc})"
            ) from exc


def _keep_ms(keep_s: float) -> int:
    """``keep_s`` as ``PEXPIRE`` milliseconds; -1 (no expiry) for a time past any server's."""
    if keep_s >= _KEEP_FOR_EVER_S:
        return -1
    return math.ceil(keep_s * 1000)


def _read_entries(reply: Any) -> Any:
    """The entries of a one-stream ``XREAD`` reply: ``[[key, entries]]`` (RESP2) or
    ``{key: [entries]}`` (RESP3); nothing if it timed out."""
    if not reply:
        return []
    if isinstance(reply, dict):
        return next(iter(reply.values()))[0]
    return reply[0][1]


def _events(entries: Any) -> list[RunEvent]:
    """Stream entries (``[(id, {"d": json}), ...]``) as events, whatever the decoding."""
    events = []
    for entry_id, fields in entries:
        data = fields.get("d", fields.get(b"d"))
        events.append(RunEvent(seq=int(_text(entry_id).partition("-")[0]), data=decode_event(data)))
    return events


def _text(value: Any) -> str:
    """A reply item as text, whatever the client's ``decode_responses``."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)
