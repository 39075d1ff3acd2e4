"""How :class:`~agent_sync.stores.RedisRunStore` talks to its server: the Lua scripts
(:mod:`._redis_scripts`) registered on the user's client, every redis-py failure made a
:class:`~agent_sync.errors.StoreUnavailableError` (a script ran whole or not at all, so
nothing changed: fail closed), and replies read as text whatever the client's
``decode_responses``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import StoreUnavailableError
from ._redis_scripts import SCRIPTS

if TYPE_CHECKING:
    from typing import TypeAlias

    import redis
    from redis.cluster import RedisCluster

    Client: TypeAlias = redis.Redis | RedisCluster
    """The clients the store takes: one server's, or a Redis Cluster's."""

__all__ = ["RedisScripts", "text", "translated"]


class RedisScripts:
    """The store's scripts, registered on ``client`` (redis-py loads each on first use)."""

    def __init__(self, client: Client) -> None:
        self._scripts = {name: client.register_script(source) for name, source in SCRIPTS.items()}

    def run(self, name: str, prefix: str, *args: Any) -> Any:
        """Run the script ``name`` with ``prefix`` and ``args`` as its ``ARGV``; its reply.

        ``prefix`` (the shard's, :mod:`._redis_keys`) is also its one declared key, which a
        Redis Cluster client routes by: every key the script names starts with it."""
        with translated():
            return self._scripts[name](keys=[prefix], args=[prefix, *args])


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
