"""Run stores for the benchmark scripts: build one from a spec, and open the ``--stores`` list.

A spec names a store the way every process of a bench can rebuild it:

* ``memory``: a new :class:`~agent_sync.stores.MemoryRunStore` (this process only);
* ``sqlite:<path>``: a :class:`~agent_sync.stores.SQLiteRunStore` on that file;
* ``redis:<port>``: a :class:`~agent_sync.stores.RedisRunStore` on ``127.0.0.1:<port>``.

:func:`open_specs` turns ``--stores memory,sqlite,redis`` into specs: ``sqlite`` is a file in a
temporary folder, ``redis`` a throwaway ``redis-server`` (Debian's package) unless a port is
given (``redis:6379``). Without a usable ``RedisRunStore`` (the redis extra) or
``redis-server``, the redis entry is skipped with a line saying why, and the others go on.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore

__all__ = ["kind", "make_store", "open_specs", "redis_missing"]

PREFIX = "agent_sync_bench:"


def kind(spec: str) -> str:
    """``memory``, ``sqlite`` or ``redis``."""
    return spec.partition(":")[0]


def redis_missing() -> str | None:
    """Why ``RedisRunStore`` cannot be used here, or ``None`` if it can."""
    try:
        import redis  # noqa: F401

        from agent_sync.stores import RedisRunStore  # noqa: F401
    except ImportError:
        return "RedisRunStore not available yet"
    return None


def make_store(spec: str, *, prefix: str = PREFIX, **options: Any) -> RunStore:
    """A store for ``spec`` (see the module docstring); ``options`` go to its constructor
    (``lease_s``...). ``prefix`` is the Redis key prefix: processes that must share
    conversations pass the same one."""
    name, _, where = spec.partition(":")
    if name == "memory" and not where:
        return MemoryRunStore(**options)
    if name == "sqlite" and where:
        return SQLiteRunStore(where, **options)
    if name == "redis" and where.isdigit():
        import redis

        from agent_sync.stores import RedisRunStore

        store: RunStore = RedisRunStore(redis.Redis(port=int(where)), prefix=prefix, **options)
        return store
    raise SystemExit(f"unknown store spec {spec!r} (memory, sqlite:<path>, redis:<port>)")


@contextmanager
def open_specs(
    stores: str | Sequence[str], *, allowed: Sequence[str] = ("memory", "sqlite", "redis")
) -> Iterator[list[str]]:
    """The specs of ``stores`` (names or specs, comma-separated), ready for the duration.

    ``sqlite`` becomes a file in a temporary folder (one per use: ``sqlite:<folder>/bench.db``),
    ``redis`` a ``redis-server`` started for the duration in that folder; a name outside
    ``allowed`` ends the bench with a message.
    """
    names = stores.split(",") if isinstance(stores, str) else list(stores)
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="agent_sync_bench")))
        specs: list[str] = []
        for name in (n.strip() for n in names if n.strip()):
            if kind(name) not in allowed:
                raise SystemExit(f"unknown store {name!r}: one of {', '.join(allowed)}")
            if name == "sqlite":
                name = f"sqlite:{folder}/bench.db"
            elif kind(name) == "redis":
                missing = redis_missing()
                if missing:
                    print(f"redis: {missing}; skipped")
                    continue
                if name == "redis":
                    from agent_sync.testing.redis_server import RedisServer, RedisServerError

                    try:
                        server = RedisServer.start(folder / "redis")
                    except RedisServerError as exc:
                        print(f"redis: {str(exc).splitlines()[0]}; skipped")
                        continue
                    stack.enter_context(server)
                    name = f"redis:{server.port}"
            specs.append(name)
        yield specs
