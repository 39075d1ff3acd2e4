"""The per-request socket abort for requests/urllib3, through real sockets on 127.0.0.1."""

from __future__ import annotations

import errno
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import requests

from agent_sync.cancel import CancelScope
from agent_sync.models._abort.requests import AbortableHTTPAdapter
from agent_sync.models._abort.urllib3 import RequestAbort, abort_on_cancel
from agent_sync.testing.openai_server import OpenAIServer
from tests.fixtures.bounds import HANG_BOUND, SLOW_ALTERNATIVE, cut_short_of

BODY = {"model": "m", "messages": [], "stream": True}


@pytest.fixture
def session() -> Iterator[requests.Session]:
    with requests.Session() as s:
        s.mount("http://", AbortableHTTPAdapter(max_retries=0))
        yield s


def _cancel_when(ready: threading.Event | None, scope: CancelScope) -> threading.Thread:
    def run() -> None:
        if ready is None or ready.wait(HANG_BOUND):
            scope.cancel("test")

    thread = threading.Thread(target=run, name="test-canceller")
    thread.start()
    return thread


def _cancel_after_stall(server: OpenAIServer, scope: CancelScope) -> threading.Thread:
    stalled = threading.Event()

    def watch() -> None:
        if server.wait_for_stall(1, timeout=HANG_BOUND):
            stalled.set()

    threading.Thread(target=watch, name="test-stall-watch", daemon=True).start()
    return _cancel_when(stalled, scope)


def test_abort_wakes_a_request_waiting_for_headers(session: requests.Session) -> None:
    with OpenAIServer([{"stall_headers": True}]) as server:
        scope = CancelScope()
        canceller = _cancel_after_stall(server, scope)
        started = time.monotonic()
        with pytest.raises(requests.ConnectionError):
            with abort_on_cancel(scope) as abort, abort.capture():
                session.post(
                    f"{server.url}/chat/completions", json=BODY, timeout=(5, SLOW_ALTERNATIVE)
                )
        assert time.monotonic() - started < cut_short_of(SLOW_ALTERNATIVE)
        assert abort.aborted
        canceller.join(HANG_BOUND)
        assert server.wait_for_idle()


def test_abort_wakes_a_silent_body_read_outside_capture(session: requests.Session) -> None:
    with OpenAIServer([{"text": "hello world", "stall_after": 2}]) as server:
        scope = CancelScope()
        received: list[bytes] = []
        with abort_on_cancel(scope) as abort:
            with abort.capture():
                response = session.post(
                    f"{server.url}/chat/completions", json=BODY, stream=True, timeout=(5, 30)
                )
            canceller = _cancel_after_stall(server, scope)
            with pytest.raises(requests.exceptions.ChunkedEncodingError):
                for chunk in response.iter_content(chunk_size=None):
                    received.append(chunk)
            response.close()
        canceller.join(HANG_BOUND)
        assert b"".join(received).startswith(b"data: ")  # what arrived before the stall
        assert server.wait_for_idle()


def test_a_cancelled_scope_fails_the_request_before_it_connects(
    session: requests.Session,
) -> None:
    with OpenAIServer(["never sent"]) as server:
        scope = CancelScope()
        scope.cancel()
        with pytest.raises(requests.ConnectionError):
            with abort_on_cancel(scope) as abort, abort.capture():
                session.post(f"{server.url}/chat/completions", json=BODY, timeout=(5, 30))
        assert server.requests == []
        assert server.turns_left == 1


def test_session_still_works_after_an_abort(session: requests.Session) -> None:
    with OpenAIServer([{"stall_after": 1}, "second"]) as server:
        scope = CancelScope()
        with abort_on_cancel(scope) as abort:
            with abort.capture():
                response = session.post(
                    f"{server.url}/chat/completions", json=BODY, stream=True, timeout=(5, 30)
                )
            canceller = _cancel_after_stall(server, scope)
            with pytest.raises(requests.RequestException):
                response.content  # noqa: B018 (reads the body)
        canceller.join(HANG_BOUND)
        after = session.post(f"{server.url}/chat/completions", json=BODY, timeout=(5, 30))
        assert after.status_code == 200
        assert b"second" in after.content
        session.close()
        assert server.wait_for_idle()


def test_late_abort_does_not_touch_the_pooled_connection_reused_by_another_request(
    session: requests.Session,
) -> None:
    """A handle whose request is over must not kill the next request on the same socket."""
    with OpenAIServer(["first", {"text": "second", "stall_after": 2}, "third"]) as server:
        first = RequestAbort()
        with first.capture():
            done = session.post(f"{server.url}/chat/completions", json=BODY, timeout=(5, 30))
        assert b"first" in done.content  # fully read: the connection is back in the pool

        second = RequestAbort()
        with second.capture():
            response = session.post(
                f"{server.url}/chat/completions", json=BODY, stream=True, timeout=(5, 30)
            )
        first.abort()  # stale handle: same pooled connection, now owned by `second`
        iterator = response.iter_content(chunk_size=None)
        assert next(iterator).startswith(b"data: ")
        assert server.wait_for_stall(1)
        second.abort()  # the right handle does abort it
        with pytest.raises(requests.exceptions.ChunkedEncodingError):
            for _ in iterator:
                pass
        response.close()
        third = session.post(f"{server.url}/chat/completions", json=BODY, timeout=(5, 30))
        assert b"third" in third.content


def test_abort_only_hits_its_own_request_in_a_shared_session(session: requests.Session) -> None:
    slow_text = "x" * 400
    turns: list[dict[str, Any]] = [
        {"stall_headers": True},
        {"text": slow_text, "chunk_size": 10, "chunk_delay": 0.005},
    ]
    with OpenAIServer(turns) as server:
        scope = CancelScope()
        outcome: dict[str, object] = {}

        def stalled_request() -> None:
            try:
                with abort_on_cancel(scope) as abort, abort.capture():
                    session.post(f"{server.url}/chat/completions", json=BODY, timeout=(5, 30))
            except requests.RequestException as exc:
                outcome["stalled"] = exc

        worker = threading.Thread(target=stalled_request, name="test-stalled-request")
        worker.start()
        assert server.wait_for_stall(1)
        other_scope = CancelScope()
        with abort_on_cancel(other_scope) as abort:
            with abort.capture():
                response = session.post(
                    f"{server.url}/chat/completions", json=BODY, stream=True, timeout=(5, 30)
                )
            body = b""
            for index, chunk in enumerate(response.iter_content(chunk_size=None)):
                if index == 3:
                    scope.cancel()  # cancels the *other* request, mid-way through this one
                body += chunk
        worker.join(HANG_BOUND)
        assert not worker.is_alive()
        assert isinstance(outcome.get("stalled"), requests.ConnectionError)
        assert body.count(b'"content":"xxxxxxxxxx"') == 40
        assert body.endswith(b"data: [DONE]\n\n")


def test_requests_outside_abort_on_cancel_are_plain(session: requests.Session) -> None:
    with OpenAIServer(["plain"]) as server:
        response = session.post(f"{server.url}/chat/completions", json=BODY, timeout=(5, 30))
        assert response.status_code == 200
        assert b"plain" in response.content


def _unanswered_listener() -> tuple[socket.socket, list[socket.socket]]:
    """A listener whose accept queue is full, so a new connect stays in SYN_SENT."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    fillers: list[socket.socket] = []
    for _ in range(8):
        filler = socket.socket()
        filler.setblocking(False)
        code = filler.connect_ex(listener.getsockname())
        assert code in (0, errno.EINPROGRESS)
        fillers.append(filler)
    return listener, fillers


def _connect_hangs(address: tuple[str, int]) -> bool:
    probe = socket.socket()
    probe.settimeout(0.2)
    try:
        probe.connect(address)
    except TimeoutError:
        return True
    except OSError:
        return False
    finally:
        probe.close()
    return False


def test_abort_wakes_a_connect_that_gets_no_answer(
    session: requests.Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    listener, fillers = _unanswered_listener()
    try:
        address = listener.getsockname()
        if not _connect_hangs(address):
            pytest.skip("this OS answers connects to a full backlog; cannot stage SYN_SENT")
        # Observe (not alter) the connect: the event fires once the SYN is out.
        connecting = threading.Event()
        guarded_connect_ex = socket.socket.connect_ex

        def observed_connect_ex(sock: socket.socket, target: Any) -> int:
            code = guarded_connect_ex(sock, target)
            connecting.set()
            return code

        monkeypatch.setattr(socket.socket, "connect_ex", observed_connect_ex)
        scope = CancelScope()
        canceller = _cancel_when(connecting, scope)
        started = time.monotonic()
        with pytest.raises(requests.ConnectionError):
            with abort_on_cancel(scope) as abort, abort.capture():
                session.post(f"http://{address[0]}:{address[1]}/v1", json=BODY,
                         timeout=(SLOW_ALTERNATIVE, SLOW_ALTERNATIVE))  # fmt: skip
        elapsed = time.monotonic() - started
        canceller.join(HANG_BOUND)
        assert connecting.is_set()
        assert elapsed < cut_short_of(SLOW_ALTERNATIVE)  # only the abort cut it short
    finally:
        for filler in fillers:
            filler.close()
        listener.close()


def test_abort_wakes_a_tls_handshake_with_a_silent_server(session: requests.Session) -> None:
    """During the handshake ssl has detached the plain socket: the duplicate still works."""
    session.mount("https://", AbortableHTTPAdapter(max_retries=0))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    client_hello = threading.Event()
    held: list[socket.socket] = []

    def accept_and_hold() -> None:
        conn, _ = listener.accept()
        held.append(conn)
        if conn.recv(1024):  # the ClientHello: the client now waits for a ServerHello
            client_hello.set()

    server_thread = threading.Thread(target=accept_and_hold, name="test-silent-tls")
    server_thread.start()
    try:
        host, port = listener.getsockname()
        scope = CancelScope()
        canceller = _cancel_when(client_hello, scope)
        started = time.monotonic()
        with pytest.raises(requests.RequestException):
            with abort_on_cancel(scope) as abort, abort.capture():
                session.post(f"https://{host}:{port}/v1", json=BODY,
                             timeout=(SLOW_ALTERNATIVE, SLOW_ALTERNATIVE))  # fmt: skip
        assert time.monotonic() - started < cut_short_of(SLOW_ALTERNATIVE)  # the handshake's
        assert client_hello.is_set()
        canceller.join(HANG_BOUND)
    finally:
        server_thread.join(HANG_BOUND)
        for conn in held:
            conn.close()
        listener.close()
