"""Shared fixtures. An autouse guard keeps every test off the real network."""

from __future__ import annotations

import compileall
import gc
import ipaddress
import re
import signal
import socket
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore
from tests.fixtures.garbage import collect_garbage
from tests.fixtures.logs import root_records

# Never assume machine speed: on a loaded machine a property test's example is slow, not
# wrong, so no example has a deadline (Hypothesis' default is 200 ms each).
settings.register_profile("agent_sync", deadline=None)
settings.load_profile("agent_sync")

__all__ = ["root_records"]  # fixture, shared with every test


def pytest_configure(config: pytest.Config) -> None:
    """Ctrl-C as a terminal delivers it, and the package compiled once (below)."""
    _deliver_ctrl_c()
    _compile_once()


def _deliver_ctrl_c() -> None:
    """Put Python's own SIGINT handler back where the suite started with SIGINT ignored.

    A shell without job control starts its background jobs (``cmd &`` in a script, say)
    with SIGINT ignored, and Python then leaves it ignored: every test that presses Ctrl-C
    (``os.kill(pid, SIGINT)``) waited out its bounds and failed, and the serial suite took
    minutes longer. The tests are about Ctrl-C as it reaches an interactive program."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)


def _compile_once() -> None:
    """Compile the package and the tests' helpers once, for the processes tests start.

    Hundreds of tests start Python processes (gunicorn and Celery workers, spawned owners
    and recoverers), and each imports agent_sync. Where ``PYTHONDONTWRITEBYTECODE`` is set
    (CI images often set it) none of them keeps its bytecode, so each compiled the package
    again. A child reads a ``__pycache__`` written here (gitignored) whatever that setting.
    """
    if not sys.dont_write_bytecode:
        return  # each process writes and reuses its own bytecode
    root = Path(__file__).resolve().parent.parent
    for part in ("agent_sync", "tests"):
        compileall.compile_dir(root / part, quiet=2, rx=re.compile(r"node_modules"))


# The files that take longest, longest first (a --durations=0 run of the README's command,
# stop 40). With --dist loadfile each file runs whole on one worker, in the order files are
# handed out: xdist's default hands out the files with the most tests first, so the few-test
# files that start real processes (the browser, MCP servers, gunicorn, Celery) came last
# and one worker ran them alone while the other sat idle (CI's last 1% took 5 minutes).
# Longest first is the classic fix (LPT scheduling); the run keeps this order because the
# README's command turns xdist's reordering off (--no-loadscope-reorder, in pyproject's
# addopts). A file missing here runs after these, in collection order: add a file that
# takes minutes; a slightly wrong order only costs a little balance.
LONGEST_FILES_FIRST = (
    "tests/test_docs.py",
    "tests/celery/test_runs.py",
    "tests/test_signal_safety.py",
    "tests/deploy/test_chat_workers.py",
    "tests/stores/test_redis_cluster.py",
    "tests/test_encodable.py",
    "tests/test_tracing.py",
    "tests/mcp/test_direct.py",
    "tests/deploy/test_deployments.py",
    "tests/models/test_anthropic_hardening.py",
    "tests/test_interrupts.py",
    "tests/mcp/test_cancel.py",
    "tests/output/test_partial.py",
    "tests/mcp/test_tools.py",
    "tests/web/test_hostile_requests.py",
    "tests/stores/test_redis.py",
    "tests/mcp/test_faults.py",
    "tests/web/test_browser_runs.py",
    "tests/stores/test_recovery_processes.py",
    "tests/models/test_eventstream.py",
    "tests/web/test_ai_sdk_client.py",
    "tests/mcp/test_serve.py",
    "tests/test_first_hour.py",
    "tests/celery/test_example.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Put the longest files first (:data:`LONGEST_FILES_FIRST`), each file's tests in
    their own order; every other file after them, as collected."""
    root = Path(__file__).resolve().parent.parent
    rank = {name: number for number, name in enumerate(LONGEST_FILES_FIRST)}
    last = len(rank)

    def file_rank(item: pytest.Item) -> int:
        try:
            return rank.get(item.path.relative_to(root).as_posix(), last)
        except ValueError:  # outside the checkout (a doctest of an installed module)
            return last

    items.sort(key=file_rank)  # stable: the order inside a rank is kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """Freeze what collection built (the imported libraries, every test module) out of the
    collector's reach: none of it becomes garbage before the process ends.

    Every collection of the oldest generation walks every object tracked, and after
    collection that is ~300,000 objects: each of the file-end sweeps
    (:func:`_collect_each_files_garbage`), and Python's own full collections, took 1.6-3.3 s
    of CPU on this project's 2-core machines (a full walk touches every page of the heap).
    Frozen, they walk only what the tests made: 552 tests of 20 files took 210 s of CPU
    serially, 171 s frozen."""
    collect_garbage()
    gc.freeze()


_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _is_local(address: Any) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX path
        return True
    host = address[0]
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _guarded_connect(self: socket.socket, address: Any) -> None:
    if not _is_local(address):
        raise OSError(f"tests must not reach the network (tried {address!r})")
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    if not _is_local(address):
        raise OSError(f"tests must not reach the network (tried {address!r})")
    return _real_connect_ex(self, address)


@pytest.fixture(scope="module", autouse=True)
def _collect_each_files_garbage() -> Iterator[None]:
    """Sweep what a file's tests left for the collector when the file ends.

    A socket a test dropped unclosed (a model's pooled connection, a client of a fake server)
    warns when the collector finalizes it, and with warnings as errors that fails whichever
    test the collector happens to run in: under ``-n 2`` another file's, at random. Swept
    here, a file's leftovers never reach the next file's tests (ResourceWarnings only: any
    other warning still fails)."""
    yield
    collect_garbage()


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only loopback connections are allowed in tests."""
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    monkeypatch.setattr(socket.socket, "connect_ex", _guarded_connect_ex)


@pytest.fixture
def thread_baseline() -> Iterator[set[threading.Thread]]:
    """Threads alive before the test; the test checks nothing it started outlives it.

    The deadline scheduler's one thread lives as long as the process (it serves every
    ``timeout=``): it is started here (a boot thread starts it: wait until it has run a
    deadline), so it never counts as left over.
    """
    from agent_sync import _deadlines

    started = threading.Event()
    _deadlines.schedule(0, started.set)
    assert started.wait(30), "the deadline scheduler thread did not start"
    yield set(threading.enumerate())


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A real ``redis-server`` on a free loopback port, for the whole session.

    Missing locally: the Redis tests skip with the reason. On CI (``CI`` set), ``.ci/run``
    installs it, and a missing server fails instead of skipping.
    """
    import os

    from agent_sync.testing.redis_server import RedisServer, redis_server_binary

    if redis_server_binary() is None:
        message = "redis-server is not installed (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must install it: {message}")
        pytest.skip(message)
    pytest.importorskip("redis", reason="pip install -e '.[redis]'")
    server = RedisServer.start(tmp_path_factory.mktemp("redis"))
    yield server
    server.stop()


@pytest.fixture(params=["memory", "sqlite", "redis"])
def make_store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[[], RunStore]]:
    """Builds store objects on one set of data, on each of the three stores (each call:
    another object, as another worker would have; a real SQLite file, a real
    redis-server)."""
    if request.param == "memory":
        shared = MemoryRunStore()
        yield lambda: shared
    elif request.param == "sqlite":
        path = str(tmp_path / "agent_sync.db")
        yield lambda: SQLiteRunStore(path)
    else:
        server = request.getfixturevalue("redis_server")
        import redis

        from agent_sync.stores import RedisRunStore

        prefix = f"rh{uuid.uuid4().hex[:10]}:"
        yield lambda: RedisRunStore(redis.Redis(port=server.port), prefix=prefix)


Spec = tuple[str, str]
"""A store that works across processes, as a picklable spec a child opens:
``("sqlite", path)`` or ``("redis", "port/prefix")`` (``test_processes.open_store``)."""


@pytest.fixture(params=["sqlite", "redis"])
def spec(request: pytest.FixtureRequest, tmp_path: Path) -> Spec:
    """A store that works across processes (a real SQLite file, a real redis-server)."""
    if request.param == "sqlite":
        return ("sqlite", str(tmp_path / "store.db"))
    server = request.getfixturevalue("redis_server")
    return ("redis", f"{server.port}/p{uuid.uuid4().hex[:12]}:")
