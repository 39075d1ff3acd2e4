"""The runs of a :class:`~agent_sync.stores.RedisRunStore` found by their id: read one, write
one (compare-and-set: every change of a begun run's state goes through :meth:`RedisRuns.write`)
and fail one whose owner's lease ran out.

A run's keys live in its conversation's shard; found by id alone, that shard is its *home*
(:class:`._redis_keys.RunHomes`: on one server the only prefix, on a Redis Cluster read once
per process). The scripts that meet a run running past its lease with ``on_owner_lost="fail"``
(``load``, ``begin``, ``replace``, ``read``) say so instead of doing their work, and the
caller fails it here (:meth:`RedisRuns.abandon`) and asks again: a call that finds nothing
wrong, the usual case, is one script, one round trip.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._run_state import RunState
from ..errors import RunConflictError
from ._protocol import StoredRun
from ._redis_client import RedisScripts, text
from ._redis_keys import RunHomes
from ._rules import (
    FINAL_STATUSES,
    abandoned,
    claimable,
    decode_state,
    encode_messages,
    encode_state,
    input_pending,
    moved_on,
    resumable,
    stale_write,
)

__all__ = ["READ_FIELDS", "RedisRuns", "stored_run"]

READ_FIELDS = (
    "state", "status", "version", "conversation_id", "started_at", "updated_at", "expired"
)  # fmt: skip
"""The fields :meth:`RedisRuns.read` returns (``expired``: ``"1"`` if the run is running
past its lease with ``on_owner_lost="fail"``, to be failed before it is shown)."""


class RedisRuns:
    """The runs under the store's prefix, by id. Thread-safe (each call is one script)."""

    def __init__(self, scripts: RedisScripts, homes: RunHomes, *, ttl_s: int) -> None:
        self._scripts = scripts
        self._homes = homes
        self._ttl = ttl_s  # a finished run's expiry (0: kept until prune)

    def read(self, run_id: str) -> dict[str, str] | None:
        """The run's :data:`READ_FIELDS`, or ``None``: no such run."""
        prefix = self._homes.of(run_id)
        reply = None if prefix is None else self._scripts.run("read", prefix, run_id)
        if not reply:
            return None
        return {name: text(value) for name, value in zip(READ_FIELDS, reply, strict=True)}

    def write(
        self,
        state: RunState,
        *,
        version: int,
        owner: str = "",
        new_owner: str = "",
        lease_s: float | None = None,
        injects: int | None = None,
        lost: bool = False,
    ) -> int:
        """One compare-and-set write of ``state`` at ``version`` (by ``owner`` if given;
        ``new_owner``: a claim; ``lost``: only if the run is lost, by the server's clock)."""
        messages = encode_messages(state.messages) if state.status in FINAL_STATUSES else []
        prefix = self._homes.of(state.run_id)
        if prefix is None:
            raise stale_write(state.run_id, "unknown run")
        reply = self._scripts.run(
            "write",
            prefix,
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
            "1" if resumable(state) else "0",
            "1" if lost else "0",
            *messages,
        )
        outcome = text(reply[0])
        if outcome == "ok":
            return int(reply[1])
        if outcome == "unknown":
            raise stale_write(state.run_id, "unknown run")
        if outcome == "over":
            raise stale_write(state.run_id, f"the run is over ({text(reply[1])})")
        if outcome == "injects":
            raise input_pending(state.run_id, int(text(reply[1])), int(injects or 0))
        if outcome == "notlost":
            status, flag, past = (text(value) for value in reply[1:4])
            claimable(state.run_id, status, resumable=flag == "1", expired=past == "1")
            raise stale_write(state.run_id, f"{status}, not lost")  # claimable raised first
        raise stale_write(state.run_id, moved_on(int(text(reply[1])), version))

    def abandon(self, run_id: str, fields: dict[str, str] | None = None) -> None:
        """Fail the run if it is (still) running past its lease with ``on_owner_lost="fail"``
        (its owner died): ``fields`` as :meth:`read` gave them, or read now."""
        fields = self.read(run_id) if fields is None else fields
        if fields is None or fields["expired"] != "1":
            return  # someone else acted on it meanwhile, or its owner renewed
        try:
            self.write(abandoned(decode_state(fields["state"])), version=int(fields["version"]))
        except RunConflictError:
            pass  # its owner committed, or another reader failed it first


def stored_run(fields: Sequence[Any], conversation_id: str) -> StoredRun:
    """A run as a script read it: its state, version, owner and lease expiry fields."""
    state, version, owner, expires = (text(value) for value in fields[:4])
    return StoredRun(
        state=decode_state(state),
        version=int(version),
        owner=owner or None,
        lease_expires_at=float(expires) if expires else None,
        conversation_id=conversation_id,
    )
