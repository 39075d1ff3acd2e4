"""A ``socketserver`` server served on a thread of its own until stopped, stopped at once.

``serve_forever(poll_interval)`` looks at ``shutdown()`` only between two selects, so a stop
waits up to the interval: the local wire servers polled every 50 ms, and each test that
started one (most model tests: a server per test) paid up to that in its teardown, more than
the test itself took. Here the loop waits on the listening socket and on one end of a socket
pair; :meth:`ServeLoop.stop` writes to the other end, and the loop ends at once.
"""

from __future__ import annotations

import selectors
import socket
import socketserver
import threading

__all__ = ["ServeLoop"]


class ServeLoop:
    """Serve ``server``'s requests in a daemon thread named ``name`` until :meth:`stop`.

    Each request is handled as ``serve_forever`` handles it (``handle_request``: a threading
    server hands it to a thread of its own). The caller still closes the server's socket
    (``server_close()``) after the stop.
    """

    def __init__(self, server: socketserver.TCPServer, name: str) -> None:
        self._server = server
        # handle_request waits up to ``timeout`` for a connection: here it is called only
        # once the listening socket is readable, so it must not wait at all
        server.timeout = 0.0
        self._wake, self._waker = socket.socketpair()
        self._lock = threading.Lock()
        self._stopped = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> ServeLoop:
        """Start serving; returns ``self``."""
        self._thread.start()
        return self

    def stop(self, timeout: float) -> None:
        """End the loop (a request being handled in a thread of its own goes on) and wait
        for its thread at most ``timeout`` seconds. Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._waker.send(b"x")
        if self._thread.ident is not None:
            self._thread.join(timeout)
        if not self._thread.is_alive():  # else it still selects on them (a hang: left be)
            self._wake.close()
            self._waker.close()

    def _run(self) -> None:
        with selectors.DefaultSelector() as selector:
            selector.register(self._server, selectors.EVENT_READ)
            selector.register(self._wake, selectors.EVENT_READ)
            while True:
                ready = selector.select()
                if any(key.fileobj is self._wake for key, _ in ready):
                    return
                self._server.handle_request()
                self._server.service_actions()
