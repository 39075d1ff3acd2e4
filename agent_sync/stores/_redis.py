""":class:`RedisRunStore`: the run store for several hosts (redis-py; the ``redis`` extra).

Design:

* The user passes the ``redis.Redis`` client, so redis-py's own options (TLS, ACL user and
  password, Sentinel, timeouts, pools) are theirs to set; the store never logs or shows it.
* Keys, under a configurable prefix (``agent_sync:`` by default)::

      {prefix}run:{run_id}            hash: state, status, version, owner, lease, times,
                                      injects (counted for its owner), signals_taken
      {prefix}signals:{run_id}        list: the run's queued cancel/inject signals (its
                                      owner took the first signals_taken; kept until
                                      the commit that consumes them)
      {prefix}conv:{id}:log           list: the conversation's messages (JSON), in order
      {prefix}conv:{id}:current       string: the run id of its running or paused run
      {prefix}conv:{id}:generation    integer: how many times the log was replaced
      {prefix}conv:{id}:values        hash: the conversation's values (:mod:`._redis_values`)
      {prefix}finished                sorted set: finished runs by end time (``prune``)
      {prefix}resumable               sorted set: running runs with on_owner_lost "resume"
                                      by lease expiry (``lost_runs``: those past it)
      {prefix}signals                 pub/sub channel: "a signal is queued for run X"
      {prefix}events:{run_id}         stream: the run's event log, entry ids "<number>-0"
      {prefix}events-complete:{run_id}  string: set once the run's event log is complete
      {prefix}wake:{id}               stream: ends the blocked read of one store object's
                                      waiting readers (:mod:`._redis_waits`); expires

  Each kind of key has its own word before the id, and no word is another's prefix up to
  its ``:``, so no id (``"<run id>:signals"``, say) names a key of another kind or run.

* Every change is one Lua script (:mod:`._redis_scripts`): it checks the version
  (compare-and-set) and writes, so two processes racing never both win; a run found by its
  id is read and written by :mod:`._redis_runs`. Time (leases, end
  times) is the Redis server's ``TIME``, so hosts with skewed clocks agree on when a lease
  ran out.
* Ending a turn trims the log to ``history_start`` and pushes the run's messages: its cost
  does not grow with the conversation.
* Signals are a list per run plus a ``PUBLISH`` on one channel, heard by
  :mod:`._redis_signals`; a run's event log (the :class:`~agent_sync.stores.RunEventLog`
  role) is a stream, :mod:`._redis_events`.
* A finished run's keys expire after ``finished_ttl_s`` (``prune`` removes them sooner);
  conversation logs never expire.
* Every redis-py failure (connection refused, timeout, a server that says no) becomes
  :class:`~agent_sync.errors.StoreUnavailableError` (:mod:`._redis_client`): a script either
  ran whole or not at all, so nothing changed (fail closed).

On a Redis Cluster (a ``redis.cluster.RedisCluster`` client) every key name also carries
a hash tag, ``{prefix}{<tag>}run:{run_id}`` and so on, so each script touches one slot; the
``finished`` and ``resumable`` sets are sharded the same way, and each run has a ``home`` key
naming its shard (:mod:`._redis_keys`). On one server the names are those above.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Sequence
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
from ._protocol import ConversationRecord, RunSignal, StoredRun
from ._recoverable import Recoverable
from ._redis_client import RedisScripts, text
from ._redis_events import RedisEventLog
from ._redis_keys import KeyLayout, RunHomes
from ._redis_runs import RedisRuns, stored_run
from ._redis_signals import RedisSignals
from ._redis_values import RedisValues
from ._rules import (
    bad_conversation_id,
    cancelled_while_lost,
    cancelled_while_paused,
    check_limit,
    check_reason,
    claimable,
    conversation_busy,
    conversation_paused,
    conversation_recovering,
    decode_messages,
    decode_state,
    encode_messages,
    encode_state,
    log_moved_on,
    not_running,
    resumable,
    run_exists,
    snapshot_of,
    stale_write,
    storable_id,
    subrun_ids,
)

if TYPE_CHECKING:
    from ._redis_client import Client

__all__ = ["RedisRunStore"]

_CAS_ATTEMPTS = 20  # cancel of a paused run racing other writers; runs failed in a row


class RedisRunStore(RedisEventLog, RedisValues, Recoverable):
    """A :class:`~agent_sync.stores.RunStore` on a Redis server, for processes on many hosts.

    Args:
        client: A ``redis.Redis`` client, or a ``redis.cluster.RedisCluster`` one
            (``decode_responses`` either way). TLS, ACLs and timeouts are set on it; the
            store never shows it in logs, errors or reprs.
        prefix: Put before every key and the channel name (several apps, one server).
        lease_s: The lease agents on this store use by default (seconds).
        finished_ttl_s: Seconds a finished run (its state, for ``get``) is kept before
            Redis expires it; ``None`` keeps it until :meth:`prune`.
        shards: On a Redis Cluster (a ``redis.cluster.RedisCluster`` client): how many hash
            slots the store spreads its keys over (at most that many masters share the
            load). Every process of the store must use the same number. Unused on one server.

    Raises:
        UsageError: Not a ``redis.Redis`` or ``RedisCluster`` client (a URL: pass
            ``redis.Redis.from_url(url)``), an empty prefix (or, on a cluster, one with
            ``{`` or ``}``), a non-positive lease or TTL, or ``shards`` not in 1..1024.
    """

    def __init__(
        self,
        client: Client,
        *,
        prefix: str = "agent_sync:",
        lease_s: float = 30.0,
        finished_ttl_s: float | None = 7 * 24 * 3600,
        shards: int = 16,
    ) -> None:
        if not callable(getattr(client, "register_script", None)):
            raise UsageError(  # never the value: a URL may hold a password
                "RedisRunStore takes a redis.Redis or RedisCluster client, not a "
                f"{type(client).__name__}: for a URL, pass redis.Redis.from_url(url)"
            )
        if not prefix:
            raise UsageError("prefix must not be empty: it keeps the store's keys apart")
        if not lease_s > 0:
            raise UsageError("lease_s must be positive (seconds)")
        if finished_ttl_s is not None and not finished_ttl_s >= 1:
            raise UsageError("finished_ttl_s must be at least 1 second, or None")
        if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= 1024:
            raise UsageError("shards must be a whole number from 1 to 1024")
        sharded = _is_cluster(client)
        if sharded and ("{" in prefix or "}" in prefix):
            raise UsageError("on a Redis Cluster the prefix must not hold { or }: the store "
                             "puts its own hash tags after it")  # fmt: skip
        self.prefix = prefix
        self.lease_s = lease_s
        self._ttl = 0 if finished_ttl_s is None else int(finished_ttl_s)
        self._keys = KeyLayout(prefix, sharded=sharded, shards=shards)
        scripts = RedisScripts(client)
        self._homes = RunHomes(client, self._keys, scripts)
        self._runs = RedisRuns(scripts, self._homes, ttl_s=self._ttl)
        super().__init__(client, scripts, layout=self._keys, ttl_s=self._ttl)  # its event log
        self._signals = RedisSignals(client, scripts, prefix=prefix, homes=self._homes)

    def __repr__(self) -> str:
        return f"<RedisRunStore prefix={self.prefix!r}>"

    def close(self) -> None:
        """Close the pub/sub connection (the client is the caller's to close)."""
        self._signals.close()

    # -- conversations and runs --

    def load(self, conversation_id: str, *, since: int = 0) -> ConversationRecord:
        if not storable_id(conversation_id):
            return ConversationRecord(
                conversation_id=conversation_id, messages=(), run=None, length=0
            )
        prefix = self._keys.conversation(conversation_id)
        reply = self._unblocked("load", prefix, conversation_id, max(0, int(since)))
        _, log, run, length, start, generation = reply
        stored = stored_run(run, conversation_id) if run else None
        if stored is not None:  # its state lives in the conversation's shard
            self._homes.learn(stored.state.run_id, prefix)
        return ConversationRecord(
            conversation_id=conversation_id,
            messages=tuple(decode_messages([text(item) for item in log])),
            run=stored,
            start=int(start),
            length=int(length),
            generation=int(generation),
        )

    def replace_log(self, conversation_id: str, messages: Sequence[Message]) -> int:
        if not storable_id(conversation_id):
            raise bad_conversation_id(conversation_id)
        texts = encode_messages(messages)
        reply = self._unblocked(
            "replace", self._keys.conversation(conversation_id), conversation_id, *texts
        )
        outcome = text(reply[0])
        if outcome == "paused":
            raise conversation_paused(conversation_id)
        if outcome == "busy":
            raise conversation_busy(conversation_id)
        if outcome == "recovering":
            raise conversation_recovering(conversation_id, text(reply[1]))
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
        prefix = self._keys.conversation(conversation_id)
        homed = self._homes.claim(state.run_id, prefix)
        if homed is None:
            raise run_exists(state.run_id)  # in another conversation's shard
        reply = self._unblocked(
            "begin",
            prefix,
            conversation_id,
            state.run_id,
            encode_state(state),
            owner,
            repr(float(lease_s)),
            expected_length,
            "1" if resumable(state) else "0",
        )
        outcome = text(reply[0])
        if outcome == "ok":
            return 1
        if homed:
            self._homes.release(state.run_id)
        if outcome == "paused":
            raise conversation_paused(conversation_id)
        if outcome == "busy":
            raise conversation_busy(conversation_id)
        if outcome == "recovering":
            raise conversation_recovering(conversation_id, text(reply[1]))
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
        return self._runs.write(state, version=version, owner=owner, injects=injects_received)

    def claim(self, run_id: str, *, owner: str, lease_s: float, version: int) -> int:
        fields = self._runs.read(run_id)
        if fields is None or int(fields["version"]) != version:
            raise stale_write(run_id, f"not at version {version}")
        state = decode_state(fields["state"])
        if state.status not in ("paused", "running"):
            claimable(run_id, state.status, resumable=False, expired=False)  # raises: over
        return self._runs.write(  # a running one must be lost: the script checks it atomically
            replace(state, status="running"),
            version=version,
            new_owner=owner,
            lease_s=lease_s,
            lost=state.status == "running",
        )

    def lost_runs(self, *, limit: int | None = None) -> list[StoredRun]:
        """The runs whose owner died and that wait for a recoverer (see ``RunStore``):
        one script, a range read of the sorted set of resumable runs when there are none."""
        limit = check_limit(limit)
        found = []
        for prefix in self._keys.shards:
            lost = self._run("lost", prefix, "" if limit is None else limit)
            for item in lost:  # a recoverer claims them next: no need to look their home up
                self._homes.learn(text(item[0]), prefix)
            found += lost
        found.sort(key=lambda item: float(text(item[4])))  # stable: one shard keeps its order
        return [stored_run(item[1:5], text(item[5])) for item in found[:limit]]

    def renew(self, run_id: str, *, owner: str, lease_s: float) -> bool:
        prefix = self._homes.of(run_id)
        if prefix is None:
            return False
        return bool(self._run("renew", prefix, run_id, owner, repr(float(lease_s))))

    def get(self, run_id: str) -> RunSnapshot | None:
        if not storable_id(run_id):
            return None
        fields = self._runs.read(run_id)
        if fields is not None and fields["expired"] == "1":  # its owner died: fail it first
            self._runs.abandon(run_id, fields)
            fields = self._runs.read(run_id)
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
        prefix = self._homes.of(run_id)
        if prefix is None:
            return False
        for _ in range(_CAS_ATTEMPTS):
            reply = self._run("signal", prefix, run_id, "cancel", payload, self._signals.channel)
            outcome = text(reply[0])
            if outcome == "queued":
                return True
            if outcome == "expired":  # its owner died: fail it, then look again
                self._runs.abandon(run_id)
                continue
            if outcome == "lost":  # its owner died, no recoverer took it yet: no one to signal
                lost = decode_state(text(reply[2]))
                try:
                    self._runs.write(
                        cancelled_while_lost(lost, reason), version=int(text(reply[1])), lost=True
                    )
                except RunConflictError:
                    continue  # claimed, renewed or cancelled meanwhile: look again
                return True
            if outcome != "paused":
                return False  # unknown, or over
            paused = decode_state(text(reply[2]))
            try:
                self._runs.write(
                    cancelled_while_paused(paused, reason), version=int(text(reply[1]))
                )
            except RunConflictError:
                continue  # resumed or cancelled meanwhile: look again
            for child in subrun_ids(paused):  # the paused children it waited on
                self.cancel(child, reason)
            return True
        raise StoreUnavailableError(f"run {run_id!r} kept changing while it was cancelled")

    def inject(self, run_id: str, content: Sequence[ContentBlock] | str) -> None:
        blocks = content_blocks(content, what="injected input")  # checked at the edge
        (encoded,) = encode_messages([{"role": "user", "content": blocks}])
        prefix = self._homes.of(run_id) if storable_id(run_id) else None
        if prefix is None:
            raise not_running(run_id)
        reply = self._run("signal", prefix, run_id, "inject", encoded, self._signals.channel)
        if text(reply[0]) != "queued":
            raise not_running(run_id)

    def wait_signals(self, run_ids: Collection[str], timeout: float) -> list[RunSignal]:
        return self._signals.wait(run_ids, timeout)

    def _wake_watcher(self) -> None:
        """End this process's running (or next) ``wait_signals`` early (its store
        watcher: a run registered, whose signals and lease it must look at now)."""
        self._signals.wake()

    def prune(self, *, older_than: float) -> int:
        removed = 0
        events_here = "0" if self._keys.sharded else "1"  # on a cluster they live by run id
        for prefix in self._keys.shards:
            reply = self._run("prune", prefix, repr(float(older_than)), events_here)
            removed += int(reply[0])
            self._homes.pruned([text(run_id) for run_id in reply[1:]])
        return removed

    # -- helpers --

    def _unblocked(self, name: str, prefix: str, conversation_id: str, *args: Any) -> Any:
        """Run the conversation script ``name`` (``load``, ``begin``, ``replace``); while it
        meets the conversation's run past its lease (``on_owner_lost="fail"``: it answers
        ``{'expired', run_id}``), fail that run and run it again."""
        for _ in range(_CAS_ATTEMPTS):
            reply = self._run(name, prefix, conversation_id, *args)
            if text(reply[0]) != "expired":
                return reply
            self._homes.learn(text(reply[1]), prefix)  # the conversation's run: its shard
            self._runs.abandon(text(reply[1]))
        raise StoreUnavailableError(
            f"conversation {conversation_id!r} kept changing while its run was failed"
        )

    def _run(self, name: str, *args: Any) -> Any:
        return self._scripts.run(name, *args)


def _is_cluster(client: Any) -> bool:
    """Is ``client`` a Redis Cluster client (redis-py's ``RedisCluster``)?"""
    from redis.cluster import RedisCluster  # the client is redis-py's: it is installed

    return isinstance(client, RedisCluster)
