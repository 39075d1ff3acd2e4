"""Where :class:`~agent_sync.stores.RedisRunStore` keeps each key: one Redis server, or the
hash slots of a Redis Cluster.

A Redis Cluster runs a script or a multi-key command only if every key it touches hashes to
one slot (else ``CROSSSLOT``). The store's scripts touch a run's keys together with its
conversation's and with the sets of finished and resumable runs, so on a cluster
(:class:`KeyLayout` with ``sharded=True``) every key name carries a *hash tag*: the part of
the name between ``{`` and ``}`` is all Redis hashes. There are ``shards`` tags, each chosen
once (:func:`shard_tags`) to hash into its own equal slice of the 16384 slots, so the shards
spread over the masters evenly however the slots are split between them (contiguous
ranges, as ``redis-cli --cluster create`` makes them).

* A conversation lives in the shard its id hashes to (CRC-32, :meth:`KeyLayout.conversation`),
  and so do its runs' keys (state, signals) and the shard's own ``finished`` and
  ``resumable`` sets and ``signal-seq`` counter: each script runs in one slot. Readers of
  the global sets (``lost_runs``, ``prune``) read every shard.
* A run is found by its id alone (``cancel(run_id)`` from anywhere), so its *home* key, in
  the shard its id hashes to (:meth:`KeyLayout.by_id`), names its conversation's shard; it is
  written before the run begins and read once per process (it never changes). It is kept
  as long as the run's entry in its shard's set of finished runs, until ``prune`` deletes
  both: giving it its state's expiry cost a round trip at each run's end, and a home whose
  run expired only leads to "no such run".
* A run's event log (and its complete mark) lives in the shard its id hashes to: a follower
  needs no look-up, and a process's waiting readers are grouped per shard, one blocked
  ``XREAD`` for the streams of each shard (``XREAD`` itself refuses streams of several
  slots, even on one node).

On one server (``sharded=False``) there is one shard and no tag: the key names are those the
store always used, so existing data stays readable.
"""

from __future__ import annotations

import binascii
import zlib
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from ._redis_client import RedisScripts, text, translated

__all__ = ["SLOTS", "KeyLayout", "RunHomes", "shard_tags", "slot_of"]

_KNOWN_MAX = 100_000  # run homes a store object remembers

SLOTS = 16384
"""A Redis Cluster's hash slots."""


def slot_of(tag: str) -> int:
    """The hash slot of a key whose hash tag is ``tag`` (Redis Cluster's CRC16)."""
    return binascii.crc_hqx(tag.encode(), 0) % SLOTS


@lru_cache(maxsize=8)
def shard_tags(shards: int) -> tuple[str, ...]:
    """``shards`` hash tags, the ``k``-th hashing into slice ``k`` of the slots (``k * 16384
    // shards`` up to the next): deterministic, the same in every process."""
    tags = []
    for k in range(shards):
        first, end = k * SLOTS // shards, (k + 1) * SLOTS // shards
        n = 0
        while not first <= slot_of(f"{k}.{n}") < end:
            n += 1  # about `shards` tries: CRC16 spreads short strings evenly
        tags.append(f"{k}.{n}")
    return tuple(tags)


class KeyLayout:
    """The key prefixes of a store under ``prefix``: one per shard (``prefix{tag}``), or just
    ``prefix`` on one server."""

    def __init__(self, prefix: str, *, sharded: bool, shards: int) -> None:
        self.prefix = prefix
        self.sharded = sharded
        self.shards: tuple[str, ...] = (
            tuple(f"{prefix}{{{tag}}}" for tag in shard_tags(shards)) if sharded else (prefix,)
        )

    def conversation(self, conversation_id: str) -> str:
        """The prefix of a conversation's keys and its runs' (state, signals)."""
        return self._shard_of(conversation_id)

    def by_id(self, run_id: str) -> str:
        """The prefix of a run's keys found by its id alone: its home, its event log."""
        return self._shard_of(run_id)

    def home(self, run_id: str) -> str:
        """The key naming the shard of a run's state (a cluster's only)."""
        return f"{self.by_id(run_id)}home:{run_id}"

    def _shard_of(self, name: str) -> str:
        if not self.sharded:
            return self.prefix
        return self.shards[zlib.crc32(name.encode("utf-8", "surrogatepass")) % len(self.shards)]


class RunHomes:
    """The shard of each run's state, by run id: :attr:`KeyLayout.prefix` on one server; on a
    cluster read from the run's home key (once per process: it never changes) and written
    when the run begins. Thread-safe (a dict, whole values)."""

    def __init__(self, client: Any, layout: KeyLayout, scripts: RedisScripts) -> None:
        self._client = client
        self._layout = layout
        self._routed = scripts.routed  # a home's command, straight to its master
        self._known: dict[str, str] = {}

    def of(self, run_id: str) -> str | None:
        """The prefix of the run's state, or ``None``: no such run."""
        if not self._layout.sharded:
            return self._layout.prefix
        known = self._known.get(run_id)
        if known is not None:
            return known
        home = self._layout.home(run_id)
        with translated():
            found = self._routed(self._layout.by_id(run_id), lambda c: c.get(home))
        if found is None:
            return None
        return self._remember(run_id, text(found))

    def learn(self, run_id: str, prefix: str) -> None:
        """The run's state was found under ``prefix`` (through its conversation, or a shard's
        set of runs): a later look-up by its id needs no read of its home."""
        if self._layout.sharded:
            self._remember(run_id, prefix)

    def group(self, run_ids: Iterable[str]) -> dict[str, list[str]]:
        """``run_ids`` by the prefix of their state (unknown runs left out)."""
        groups: dict[str, list[str]] = {}
        for run_id in run_ids:
            prefix = self.of(run_id)
            if prefix is not None:
                groups.setdefault(prefix, []).append(run_id)
        return groups

    def claim(self, run_id: str, prefix: str) -> bool | None:
        """Before a run begins under ``prefix``: write its home. ``True`` if this wrote it,
        ``False`` if it already named ``prefix``, ``None`` if another shard (the id is
        taken)."""
        if not self._layout.sharded:
            return False
        home = self._layout.home(run_id)
        with translated():
            before = self._routed(
                self._layout.by_id(run_id), lambda c: c.set(home, prefix, nx=True, get=True)
            )
        if before is None:
            self._remember(run_id, prefix)
            return True
        return False if text(before) == prefix else None

    def release(self, run_id: str) -> None:
        """Undo a :meth:`claim` that wrote the home of a run that did not begin."""
        self._known.pop(run_id, None)
        home = self._layout.home(run_id)
        with translated():
            self._routed(self._layout.by_id(run_id), lambda c: c.delete(home))

    def pruned(self, run_ids: Sequence[str]) -> None:
        """The runs are gone: delete what of theirs lives by id (home, event log)."""
        if not self._layout.sharded or not run_ids:
            return
        keys = []
        for run_id in run_ids:
            self._known.pop(run_id, None)
            by_id = self._layout.by_id(run_id)
            keys += [f"{by_id}home:{run_id}", f"{by_id}events:{run_id}",
                     f"{by_id}events-complete:{run_id}"]  # fmt: skip
        with translated():
            self._client.delete(*keys)  # redis-py splits it by slot

    def _remember(self, run_id: str, prefix: str) -> str:
        if len(self._known) >= _KNOWN_MAX:
            self._known.clear()  # a bound, not a policy: reading a home again is one GET
        self._known[run_id] = prefix
        return prefix
