"""The SQLite connections of one :class:`~agent_sync.stores.SQLiteRunStore` in one process.

* **One writer connection.** SQLite lets one connection write at a time per file, so a
  process's writes queue on a Python lock (no busy polling between its own threads) and
  only the connection holding it waits for other processes (the busy timeout). A read uses
  it too when no write holds it (its page cache stays current after this process's writes).
* **A few reader connections** (:data:`READERS`), taken from an idle list while a write
  holds the writer: a read never queues behind a write (WAL: a reader sees the last
  committed snapshot), and the number of descriptors is bounded per store and process
  (about 3 per connection: the file, its WAL and its shared memory), not per thread.
* **The file this store opened, and no other.** Connections open it with ``mode=rw`` (they
  never create it), and every write and new connection checks that the path still names
  the file opened: a file deleted or replaced under a running store fails closed with an
  error that names it, instead of a new, empty file with the default mode (a read on an
  open connection may still see the deleted file's last state: it loses nothing).
* **Fork.** A fork waits until no thread of the process is inside SQLite (a fork taken
  while one is would copy SQLite's mutexes held, and the child's first ``connect`` would
  wait forever); the child neither uses nor closes the parent's connections (closing one
  drops POSIX locks SQLite shares between all connections of the process to the file), and
  opens its own.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import urllib.request
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from ..errors import StoreUnavailableError

__all__ = ["READERS", "Connections", "create_private"]

READERS = 4
"""Reader connections per store and process (more concurrent reads wait for one)."""

_INHERITED: list[object] = []
"""Connections a forked child inherited from its parent: kept open, never used."""


def create_private(path: str) -> None:
    """Create the database file with mode 0600 if it does not exist (SQLite gives its
    ``-wal`` and ``-shm`` files the same mode).

    An existing file is left alone, never opened: closing any descriptor of a file drops
    every POSIX lock this process holds on it, including those of SQLite connections that
    other stores on the same path have open, and a connection that lost its locks can
    lose writes (another process then takes itself for the last one and removes the WAL).
    """
    try:
        descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise StoreUnavailableError(f"cannot create the store file: {exc}") from exc
    os.close(descriptor)


class Connections:
    """One writer and up to :data:`READERS` readers on ``path``, per process. Thread-safe."""

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self.path = path
        self._uri = "file:" + urllib.request.pathname2url(os.path.abspath(path)) + "?mode=rw"
        self._busy_timeout_s = busy_timeout_s
        self._identity: tuple[int, int] | None = None
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        self._write_lock = threading.Lock()
        self._writer: sqlite3.Connection | None = None
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0  # reader connections open (idle or in use)
        self._freed = threading.Condition(threading.Lock())
        self._gate = threading.Condition(threading.Lock())  # threads inside SQLite; fork waits
        self._inside = 0
        self._forking = False

    def opened(self) -> None:
        """Remember which file the path names now (after the store created or found it)."""
        self._identity = self._stat()

    @contextmanager
    def writer(self) -> Iterator[sqlite3.Connection]:
        """The process's writer connection, outside any transaction (the schema script)."""
        self._enter()
        try:
            connection = self._take_writer(block=True)
            assert connection is not None
            try:
                yield connection
            finally:
                self._write_lock.release()
        finally:
            self._leave()

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` on the writer connection (``write``), or a
        deferred read (a WAL snapshot) on the writer's if no write holds it (its page cache
        is current after this process's writes), else on a reader's: a read never waits.
        sqlite3 errors become StoreUnavailableError, rolled back: nothing changed."""
        self._enter()  # one flat manager: every store operation goes through it
        try:
            if write:  # a write to a deleted file would be lost: checked (3-4 us) each time
                self._check_file()
            writer = self._take_writer(block=True) if write else self._take_writer(block=False)
            connection = writer if writer is not None else self._take_reader()
            try:
                _run(connection, "BEGIN IMMEDIATE" if write else "BEGIN")
                try:
                    yield connection
                except BaseException as exc:
                    _rollback(connection)
                    if isinstance(exc, sqlite3.Error):
                        raise StoreUnavailableError(
                            f"the SQLite store is unavailable: {exc}"
                        ) from exc
                    raise
                try:
                    connection.execute("COMMIT")
                except sqlite3.Error as exc:
                    _rollback(connection)
                    raise StoreUnavailableError(
                        f"the SQLite store could not commit: {exc}"
                    ) from exc
            finally:
                if writer is not None:
                    self._write_lock.release()
                else:
                    with self._freed:
                        self._idle.append(connection)
                        self._freed.notify()
        finally:
            self._leave()

    def rows(self, sql: str, parameters: Sequence[object]) -> list[Any]:
        """One read statement, in autocommit (its own snapshot): the cheapest read, for
        polls. On the writer connection if no write holds it, else a reader's."""
        self._enter()
        try:
            writer = self._take_writer(block=False)
            connection = writer if writer is not None else self._take_reader()
            try:
                return connection.execute(sql, parameters).fetchall()
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc
            finally:
                if writer is not None:
                    self._write_lock.release()
                else:
                    with self._freed:
                        self._idle.append(connection)
                        self._freed.notify()
        finally:
            self._leave()

    def close(self) -> None:
        """Close the idle connections (those in use close when given back and dropped)."""
        with self._gate:
            while self._inside:
                self._gate.wait()
            connections, self._idle = self._idle, []
            writer, self._writer = self._writer, None
            self._opened = 0
        for connection in [*connections, *([writer] if writer is not None else [])]:
            connection.close()

    # -- inside --

    def _take_writer(self, *, block: bool) -> sqlite3.Connection | None:
        """The writer connection, its lock held (``None``: not ``block`` and it is busy)."""
        if not block:
            if not self._write_lock.acquire(blocking=False):
                return None
        elif not self._write_lock.acquire(timeout=self._busy_timeout_s):
            raise StoreUnavailableError(
                "the SQLite store is unavailable: this process's other writes held it "
                f"past the busy timeout ({self._busy_timeout_s} s)"
            )
        try:
            if self._writer is None:
                self._writer = self._connect()
        except BaseException:
            self._write_lock.release()
            raise
        return self._writer

    def _take_reader(self) -> sqlite3.Connection:
        with self._freed:
            while not self._idle:
                if self._opened < READERS:
                    self._opened += 1
                    break
                self._freed.wait()
            else:
                return self._idle.pop()
        try:
            return self._connect()
        except BaseException:
            with self._freed:
                self._opened -= 1
                self._freed.notify()
            raise

    def _connect(self) -> sqlite3.Connection:
        self._check_file()
        try:
            connection = sqlite3.connect(
                self._uri,
                uri=True,
                timeout=self._busy_timeout_s,
                isolation_level=None,
                check_same_thread=False,  # one thread at a time, handed over under a lock
            )
            connection.execute("PRAGMA journal_mode=WAL")
            connection.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc
        return connection

    def _enter(self) -> None:
        """Count this thread inside SQLite (a fork waits for none to be)."""
        if self._pid != os.getpid():  # forked without the at-fork hook (it always runs)
            self._inherit()
        with self._gate:
            while self._forking:
                self._gate.wait()
            self._inside += 1

    def _leave(self) -> None:
        with self._gate:
            self._inside -= 1
            if not self._inside:
                self._gate.notify_all()

    def _check_file(self) -> None:
        if self._identity is not None and self._stat() != self._identity:
            raise StoreUnavailableError(
                f"the SQLite store file {self.path!r} was deleted or replaced after this "
                "store opened it: nothing is written to another file; restart the process "
                "to open (or create) it again"
            )

    def _stat(self) -> tuple[int, int] | None:
        try:
            found = os.stat(self.path)
        except OSError:
            return None
        return (found.st_dev, found.st_ino)

    def _inherit(self) -> None:
        _INHERITED.append((self._writer, self._idle))  # neither use nor close them
        self._reset()

    def _before_fork(self) -> None:
        with self._gate:
            self._forking = True
            while self._inside:
                self._gate.wait()

    def _after_fork(self) -> None:
        with self._gate:
            self._forking = False
            self._gate.notify_all()


def _run(connection: sqlite3.Connection, statement: str) -> None:
    try:
        connection.execute(statement)
    except sqlite3.Error as exc:
        raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc


def _rollback(connection: sqlite3.Connection) -> None:
    try:
        connection.execute("ROLLBACK")
    except sqlite3.Error:
        pass


_POOLS: weakref.WeakSet[Connections] = weakref.WeakSet()


def _before_fork() -> None:
    for pool in list(_POOLS):
        pool._before_fork()


def _after_fork_in_parent() -> None:
    for pool in list(_POOLS):
        pool._after_fork()


def _after_fork_in_child() -> None:
    for pool in list(_POOLS):  # the only thread of the child: nobody else is inside
        pool._inherit()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(
        before=_before_fork,
        after_in_parent=_after_fork_in_parent,
        after_in_child=_after_fork_in_child,
    )
