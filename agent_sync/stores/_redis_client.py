"""How :class:`~agent_sync.stores.RedisRunStore` talks to its server: the Lua scripts
(:mod:`._redis_scripts`) registered on the user's client, every redis-py failure made a
:class:`~agent_sync.errors.StoreUnavailableError` (a script ran whole or not at all, so
nothing changed: fail closed), and replies read as text whatever the client's
``decode_responses``.

On a Redis Cluster a script is sent straight to the master of its one key's slot (the slot
of a shard's prefix is known, and its master is in the client's own slot table): redis-py's
``RedisCluster`` would find the slot again for each command (parse the command for its keys,
hash them, look the node up), about 25 us of CPU a command, a third of a round trip's. A
redirect (``MOVED``, ``ASK``), a cluster that is down or a node that does not answer sends
the script through ``RedisCluster`` instead, which follows the redirect, retries and
refreshes its slot table: the next script goes to the master that table names."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import StoreUnavailableError
from ._redis_scripts import SCRIPTS

if TYPE_CHECKING:
    from typing import TypeAlias

    import redis
    from redis.cluster import RedisCluster

    Client: TypeAlias = redis.Redis | RedisCluster
    """The clients the store takes: one server's, or a Redis Cluster's."""

__all__ = ["RedisScripts", "text", "translated"]

_T = TypeVar("_T")


class RedisScripts:
    """The store's scripts, registered on ``client`` (redis-py loads each on first use)."""

    def __init__(self, client: Client) -> None:
        import redis  # the client is redis-py's: it is installed
        from redis.cluster import RedisCluster
        from redis.exceptions import AskError, ClusterDownError, TryAgainError

        self._client = client
        self._cluster = isinstance(client, RedisCluster)
        # what sends a script through the cluster client instead (MOVED is an AskError: the
        # cluster client follows it and looks its table up again)
        self._reroute: tuple[type[Exception], ...] = (
            AskError, ClusterDownError, TryAgainError, redis.ConnectionError, redis.TimeoutError
        )  # fmt: skip
        self._slots: dict[str, int] = {}  # a shard's prefix -> its slot (cluster)
        self._scripts = {name: client.register_script(source) for name, source in SCRIPTS.items()}

    def run(self, name: str, prefix: str, *args: Any) -> Any:
        """Run the script ``name`` with ``prefix`` and ``args`` as its ``ARGV``; its reply.

        ``prefix`` (the shard's, :mod:`._redis_keys`) is also its one declared key, which a
        Redis Cluster client routes by: every key the script names starts with it."""
        script = self._scripts[name]
        with translated():
            return self.routed(
                prefix, lambda c: script(keys=[prefix], args=[prefix, *args], client=c)
            )

    def routed(self, key: str, call: Callable[[Any], _T]) -> _T:
        """``call(client)`` with the client to send a command on ``key`` through: on a
        cluster the master of ``key``'s slot, and the cluster client if that fails by a
        redirect or an unreachable node (see the module docstring); else the store's client.
        Failures are redis-py's (see :func:`translated`)."""
        if not self._cluster:
            return call(self._client)
        node = self._master(key)
        if node is not None:
            try:
                return call(node)
            except self._reroute:
                pass
        return call(self._client)

    def _master(self, key: str) -> Any:
        """The ``redis.Redis`` client of the master ``key``'s slot is on, by the cluster
        client's slot table (``None``: not in it)."""
        cluster: Any = self._client
        slot = self._slots.get(key)
        if slot is None:
            slot = self._slots[key] = cluster.keyslot(key)
        try:  # redis-py's own table: a version that keeps it elsewhere routes as before
            nodes = cluster.nodes_manager.slots_cache.get(slot)
            if not nodes:
                return None
            node = nodes[0]  # its master, then its replicas
            return node.redis_connection or cluster.get_redis_connection(node)
        except AttributeError:
            return None


@contextmanager
def translated() -> Iterator[None]:
    """redis-py failures -> StoreUnavailableError (redis-py's messages name the server and
    the failure, never a password)."""
    import redis as redis_module

    try:
        yield
    except redis_module.RedisError as exc:
        raise StoreUnavailableError(
            f"the Redis store is unavailable ({type(exc).__name__}: {exc})"
        ) from exc


def text(value: Any) -> str:
    """A reply item as text, whatever the client's ``decode_responses``."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    return str(value)
