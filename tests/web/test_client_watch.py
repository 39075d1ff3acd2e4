"""Followers whose client socket is watched (as a route's stream is when the server shows
the socket): a client that leaves while the run is silent is noticed at once by the one
client-watcher thread of the process, which ends the follower's wait; a client that sends
bytes is not taken for gone; the follower wakes for nothing else.

Real sockets (a connected pair: the follower watches one end, the test is the client at
the other), real stores (memory, a SQLite file, a real redis-server)."""

from __future__ import annotations

import json
import os
import socket
import threading
import uuid
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from agent_sync._run_log._local_log import open_local_log
from agent_sync.stores import RunStore, SQLiteRunStore
from agent_sync.web._encoders import NativeEncoder
from agent_sync.web._follow import Follower

WAIT = 30.0  # the longest a test waits for what must happen (a hang fails, not a slow box)
SILENT = 600.0  # keep-alive interval: nothing in a test may be noticed through keep-alives


@dataclass
class Followed:
    """One follower iterated in its own thread (as a server's thread would), and the
    client's end of its socket."""

    follower: Follower
    peer: socket.socket
    frames: list[bytes] = field(default_factory=list)
    gone_calls: list[str] = field(default_factory=list)
    gone: threading.Event = field(default_factory=threading.Event)
    waiting: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def ended(self) -> bool:
        assert self.thread is not None
        self.thread.join(WAIT)
        return not self.thread.is_alive()


def follow(store: Any, run_id: str, after: int = 1) -> Followed:
    client, peer = socket.socketpair()
    followed: Followed

    def on_gone() -> None:
        followed.gone_calls.append(threading.current_thread().name)
        followed.gone.set()

    follower = Follower(
        store,
        run_id,
        after=after,
        encoder=NativeEncoder(run_id),
        keepalive=SILENT,
        replay_ttl=60,
        client_socket=client,
        on_gone=on_gone,
    )
    followed = Followed(follower, peer)

    def iterate() -> None:
        try:
            for chunk in follower:
                followed.frames.append(chunk)
                followed.waiting.set()  # the opening is out: it waits for records now
        finally:
            follower.close()  # what the server does once the iteration ends
            client.close()

    followed.thread = threading.Thread(target=iterate, daemon=True)
    followed.thread.start()
    assert followed.waiting.wait(WAIT)
    return followed


def new_log(store: Any) -> str:
    run_id = f"r{uuid.uuid4().hex[:12]}"
    store.append_events(run_id, [{"type": "run"}], after=0)
    return run_id


def watcher_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "agent-sync-client-watch"]


@pytest.fixture
def store(make_store: Callable[[], RunStore]) -> Iterator[Any]:
    yield make_store()


def test_a_client_that_leaves_a_silent_stream_is_noticed_and_the_stream_ends(store: Any) -> None:
    followed = follow(store, new_log(store))
    followed.peer.close()
    assert followed.gone.wait(WAIT), "the client left and on_gone was never called"
    assert followed.ended(), "the follower went on waiting after its client left"
    assert followed.frames == [NativeEncoder("x").opening()]  # no keep-alive revealed it
    assert len(followed.gone_calls) == 1  # once, though the server closed the body too


def test_a_client_that_leaves_a_run_published_here_is_noticed_at_once() -> None:
    from agent_sync.stores import MemoryRunStore

    store = MemoryRunStore()
    run_id = new_log(store)
    log = open_local_log(run_id, after=1)  # this process publishes the run: no store read
    try:
        followed = follow(store, run_id)
        followed.peer.close()
        assert followed.gone.wait(WAIT)
        assert followed.ended()  # its wait (for SILENT s) was cut short
        assert len(followed.gone_calls) == 1
    finally:
        log.end()


@pytest.mark.parametrize("kind", ["sqlite", "redis"])
def test_a_store_wait_that_can_be_cut_short_is_the_follower_s_only_wait(
    kind: str, request: pytest.FixtureRequest, tmp_path: Any
) -> None:
    """SQLite's and Redis's waits can be ended: the follower's thread notices and calls
    on_gone itself, after one wait on its log (not a wait woken every so often to look)."""
    reads: list[float] = []
    reading = threading.Event()

    def counting(base: type[Any]) -> type[Any]:
        def _read_events_woken(self: Any, run_id: str, **options: Any) -> Any:
            reads.append(options["timeout"])
            reading.set()
            return base._read_events_woken(self, run_id, **options)

        return type(f"Counting{base.__name__}", (base,), {"_read_events_woken": _read_events_woken})

    if kind == "sqlite":
        store = counting(SQLiteRunStore)(str(tmp_path / "store.db"))
    else:
        import redis

        from agent_sync.stores import RedisRunStore

        server = request.getfixturevalue("redis_server")
        store = counting(RedisRunStore)(redis.Redis(port=server.port), prefix="cut:")
    followed = follow(store, new_log(store))
    assert reading.wait(WAIT)  # it waits on its log (for SILENT s, unless cut short)
    followed.peer.close()
    assert followed.gone.wait(WAIT) and followed.ended()
    assert followed.gone_calls == [followed.thread.name]  # type: ignore[union-attr]
    assert len(reads) == 1 and reads[0] > SILENT - WAIT  # one wait, for the whole interval


def test_a_client_that_sends_bytes_is_not_taken_for_gone(store: Any) -> None:
    run_id = new_log(store)
    followed = follow(store, run_id)
    followed.peer.sendall(b"hello")  # alive: the socket is no longer watched
    store.append_events(run_id, [{"type": "done", "stop_reason": "end_turn"}], after=1)
    assert followed.ended()
    assert b"done" in b"".join(followed.frames)
    followed.peer.close()
    assert followed.gone_calls == []


def test_records_still_flow_and_a_client_leaving_after_the_end_is_not_gone(store: Any) -> None:
    run_id = new_log(store)
    followed = follow(store, run_id)
    store.append_events(run_id, [{"type": "text", "text": "hi"}], after=1)
    store.append_events(run_id, [{"type": "done", "stop_reason": "end_turn"}], after=2)
    assert followed.ended()
    followed.peer.close()
    assert b'"hi"' in b"".join(followed.frames) and followed.gone_calls == []


def test_one_watcher_thread_serves_every_follower_and_ends_with_the_last(store: Any) -> None:
    for thread in watcher_threads():  # an earlier test's, ending
        thread.join(WAIT)
    many = [follow(store, new_log(store)) for _ in range(5)]
    assert len(watcher_threads()) == 1
    for followed in many:  # all leave, then each is seen gone: their waits overlap (the
        followed.peer.close()  # memory store's cannot be cut short: up to 1 s each)
    for followed in many:
        assert followed.gone.wait(WAIT) and followed.ended()
    for thread in watcher_threads():  # nothing left to watch: the thread ends
        thread.join(WAIT)
    assert watcher_threads() == []
    assert all(len(followed.gone_calls) == 1 for followed in many)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_watches_its_own_clients_with_its_own_thread() -> None:
    """gunicorn --preload: the parent's watcher thread does not exist in the child, whose
    followers still notice their clients leaving."""
    from agent_sync.stores import MemoryRunStore

    store = MemoryRunStore()
    parents = follow(store, new_log(store))  # the parent's watcher runs at the fork
    read_end, write_end = os.pipe()
    with warnings.catch_warnings():
        # 3.12+ warns that forking a multi-threaded process is risky: that is the point.
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # the child: report over the pipe, and never return into pytest
        code = 1
        try:
            parents.peer.close()  # the child's copy: the parent's client leaves with its own
            before = len(watcher_threads())
            own = follow(store, new_log(store))
            own.peer.close()
            report = {"before": before, "gone": own.gone.wait(WAIT) and own.ended()}
            os.write(write_end, json.dumps(report).encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    parents.peer.close()  # the parent's watcher still serves the parent (while the child
    # waits for its own client: the two waits overlap, each up to 1 s on the memory store)
    with os.fdopen(read_end, "rb") as reader:
        report = json.loads(reader.read() or b"{}")
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert report == {"before": 0, "gone": True}
    assert parents.gone.wait(WAIT) and parents.ended()
