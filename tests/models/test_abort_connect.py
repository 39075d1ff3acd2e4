"""The one abortable connect both socket aborts use (``models/_abort/_connect.py``).

Real sockets on 127.0.0.1. An abort in ``SYN_SENT`` is tested end to end per transport
(``test_cancel_while_connecting`` in the Anthropic and OpenAI tests, the Bedrock one, and
``test_urllib3_abort.py``); here, the window a plain blocking ``connect()`` leaves open:
an abort landing after the socket was registered but before the SYN is out.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from agent_sync.models._abort._connect import connect
from tests.fixtures.bounds import HANG_BOUND


class Handle:
    """An abort handle whose ``aborted`` flips when the tracker is shown the socket: the
    abort lands after the registration, before the connect starts (the old window)."""

    def __init__(self, *, abort_on_track: bool) -> None:
        self.aborted = False
        self.tracked: list[socket.socket | None] = []
        self._abort_on_track = abort_on_track

    def track(self, sock: socket.socket | None) -> Handle:
        self.tracked.append(sock)
        if sock is not None and self._abort_on_track:
            self.aborted = True
        return self


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.settimeout(0)
        yield server


def _accepted(server: socket.socket) -> bool:
    try:
        conn, _ = server.accept()
    except BlockingIOError:
        return False
    conn.close()
    return True


def test_connects_and_keeps_the_timeout(listener: socket.socket) -> None:
    handle = Handle(abort_on_track=False)
    sock = connect(listener.getsockname(), 2.5, track=handle.track)
    try:
        assert sock.gettimeout() == 2.5 and handle.tracked == [sock]
        assert sock.getpeername() == listener.getsockname()
    finally:
        sock.close()


def test_an_abort_after_registration_stops_the_connect_before_the_syn(
    listener: socket.socket,
) -> None:
    handle = Handle(abort_on_track=True)
    with pytest.raises(ConnectionAbortedError):
        connect(listener.getsockname(), HANG_BOUND, track=handle.track)
    assert handle.tracked[-1] is None  # the failed socket was dropped by its tracker
    assert len(handle.tracked) == 2  # no further address was tried once aborted
    assert not _accepted(listener)  # nothing reached the server
