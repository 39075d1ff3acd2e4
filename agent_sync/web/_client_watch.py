"""Noticing that the clients of silent streams left: one watcher thread per process.

A stream that follows a run (:class:`._follow.Follower`) may wait minutes for its next
record. If the server shows the client's socket, the stream registers it here while it
streams; the watcher thread (``agent-sync-client-watch``, started on first use, ended when
nothing is watched) waits on every registered socket at once with one selector (epoll,
kqueue or poll), so an idle process wakes for nothing. A socket turns readable when its
client closes or resets the connection (or sends bytes): the thread then peeks
(:class:`._disconnect.SocketProbe`: EOF and a reset mean gone, bytes mean alive and the
socket is no longer watched) and calls the gone client's callback, at once. The callback
runs in the watcher's thread: it must be quick and never block (a stream wakes its own
thread, which does the rest).

Request threads share it: they take its lock only with ``with`` on a plain lock and hand
changes to the thread through a ``SimpleQueue`` and a wake-up socket pair (the rule of
:mod:`agent_sync._signal_safe`). A forked child (gunicorn ``--preload``) forgets the
parent's watcher (its thread does not exist there, and its selector is the parent's).
"""

from __future__ import annotations

import logging
import os
import selectors
import socket
import threading
from collections.abc import Callable
from queue import Empty, SimpleQueue

from ._disconnect import SocketProbe

__all__ = ["Watch", "watch_client"]

logger = logging.getLogger(__name__)


class Watch:
    """One registered client socket; :meth:`stop` (idempotent) unregisters it."""

    def __init__(self, client: socket.socket, on_gone: Callable[[], None]) -> None:
        self.probe = SocketProbe(client)
        self.on_gone = on_gone
        self.stopped = False
        self.fd = -1  # its number in the watcher's selector (the watcher's thread alone)

    def stop(self) -> None:
        """Stop watching: after this returns, ``on_gone`` is not called any more, unless
        the watcher's thread is calling it right now."""
        if not self.stopped:
            self.stopped = True
            _watcher().remove(self)


class _ClientWatcher:
    """The process's registered sockets and the thread that waits on them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # only ever `with self._lock:`
        self._thread: threading.Thread | None = None
        self._changes: SimpleQueue[tuple[bool, Watch]] = SimpleQueue()  # (add?, watch)
        # The running thread's selector and wake-up pair: opened when it starts, closed when
        # it ends (nothing is left open while nothing is watched); set under the lock.
        self._selector: selectors.BaseSelector | None = None
        self._wake_r: socket.socket | None = None
        self._wake_w: socket.socket | None = None

    def add(self, watch: Watch) -> None:
        self._changes.put((True, watch))
        with self._lock:
            if self._thread is None or not self._thread.is_alive():  # (or a start cut short)
                self._open()
                self._thread = threading.Thread(
                    target=self._run, name="agent-sync-client-watch", daemon=True
                )
                self._thread.start()
                return
        self._poke()

    def _open(self) -> None:
        self.close()  # a start cut short left them open
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self._selector = selectors.DefaultSelector()
        self._selector.register(self._wake_r, selectors.EVENT_READ)

    def close(self) -> None:
        """Close the selector and the wake-up pair (under the lock, or in a forked child:
        there the parent's stay open)."""
        for resource in (self._selector, self._wake_r, self._wake_w):
            if resource is not None:
                resource.close()
        self._selector = self._wake_r = self._wake_w = None

    def remove(self, watch: Watch) -> None:
        self._changes.put((False, watch))
        self._poke()

    def _poke(self) -> None:
        wake_w = self._wake_w  # None or closed: no thread runs; the next one takes the change
        try:
            if wake_w is not None:
                wake_w.send(b"\0")
        except OSError:  # buffer full (a wake-up is pending anyway), or closed
            pass

    def _run(self) -> None:
        with self._lock:
            selector, wake_r = self._selector, self._wake_r
        assert selector is not None and wake_r is not None  # opened before the start
        watched: dict[int, Watch] = {}  # fd -> its watch
        while True:
            self._apply_changes(selector, watched)
            if not watched:
                with self._lock:
                    if self._changes.empty():  # an add() after this starts a new thread
                        self._thread = None
                        self.close()
                        return
                continue
            for key, _ in selector.select():
                if key.fileobj is wake_r:
                    _drain(wake_r)
                    continue
                watch = watched.get(key.fd)
                if watch is not None and watch is key.data:
                    self._look(selector, watch, watched)

    def _apply_changes(self, selector: selectors.BaseSelector, watched: dict[int, Watch]) -> None:
        while True:
            try:
                add, watch = self._changes.get_nowait()
            except Empty:
                return
            if not add:
                if watched.get(watch.fd) is watch:
                    _forget(selector, watch.fd, watched)
                continue
            client = watch.probe.client
            try:
                fd = -1 if client is None or watch.stopped else client.fileno()
            except OSError:
                fd = -1
            if fd < 0:  # ended, or the socket closed, before its turn
                continue
            _forget(selector, fd, watched)  # a closed socket's number, now this one's
            try:
                selector.register(fd, selectors.EVENT_READ, watch)
            except (OSError, ValueError):  # closed meanwhile
                continue
            watch.fd = fd
            watched[fd] = watch

    @staticmethod
    def _look(selector: selectors.BaseSelector, watch: Watch, watched: dict[int, Watch]) -> None:
        """A watched socket is readable: gone (call back once), or bytes (stop watching)."""
        gone = watch.probe.gone()
        if gone or not watch.probe.watching:
            _forget(selector, watch.fd, watched)
        if not gone or watch.stopped:
            return
        watch.stopped = True
        try:
            watch.on_gone()
        except Exception:
            logger.exception("a client-gone callback failed")


def _forget(selector: selectors.BaseSelector, fd: int, watched: dict[int, Watch]) -> None:
    if watched.pop(fd, None) is not None:
        try:
            selector.unregister(fd)
        except (KeyError, ValueError, OSError):
            pass


def _drain(wake_r: socket.socket) -> None:
    try:
        while wake_r.recv(4096):
            pass
    except OSError:  # BlockingIOError: drained
        pass


_state: list[_ClientWatcher | None] = [None]
_state_lock = threading.Lock()


def _watcher() -> _ClientWatcher:
    with _state_lock:
        watcher = _state[0]
        if watcher is None:
            watcher = _state[0] = _ClientWatcher()
        return watcher


def watch_client(client: socket.socket, on_gone: Callable[[], None]) -> Watch:
    """Call ``on_gone()`` (in the watcher's thread, once) as soon as ``client`` closes or
    resets its connection, until the returned watch is stopped. A client that sends bytes
    is presumed alive and no longer watched."""
    watch = Watch(client, on_gone)
    _watcher().add(watch)
    return watch


def _forget_watcher() -> None:
    """In a forked child: the parent's thread does not run here, and its selector and
    wake-up pair are shared with the parent; a new one is made on first use."""
    global _state_lock
    inherited, _state[0] = _state[0], None
    _state_lock = threading.Lock()
    if inherited is not None:
        inherited.close()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_watcher)
