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

from .._signal_safe import Event
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
    """One writer and up to :data:`READERS` readers on ``path``, per process. Thread-safe.

    Signal-safe (the rule of :mod:`agent_sync._signal_safe`): the pool's state is guarded by
    a plain lock taken only with ``with``, each block records what a thread took in call-free
    statements at its end, and each thing taken has its own ``finally`` that gives it back;
    waits are on lock-free events with a short timeout (a wake-up lost to a signal costs at
    most :data:`_WAKE_S`). A ``KeyboardInterrupt`` anywhere in a store call leaves no lock,
    count, connection or open transaction behind for the other threads.
    """

    def __init__(self, path: str, busy_timeout_s: float) -> None:
        self.path = path
        self._uri = "file:" + urllib.request.pathname2url(os.path.abspath(path)) + "?mode=rw"
        self._busy_timeout_s = busy_timeout_s
        self._identity: tuple[int, int] | None = None
        self._reset()
        _POOLS.add(self)

    def _reset(self) -> None:
        self._pid = os.getpid()
        # An RLock: its owner-checked release undoes an acquire a signal interrupted on return.
        self._write_lock = threading.RLock()
        self._writer: sqlite3.Connection | None = None
        self._lock = threading.Lock()  # everything below; only ever `with self._lock:`
        self._idle: list[sqlite3.Connection] = []
        self._opened = 0  # reader connections open (idle or in use)
        self._inside = 0  # threads inside SQLite (a fork waits for none to be)
        self._forking = False
        self._reader_waiters: list[Event] = []  # woken when a reader comes back
        self._quiet_waiters: list[Event] = []  # woken when no thread is inside
        self._fork_waiters: list[Event] = []  # woken when the fork is done

    def opened(self) -> None:
        """Remember which file the path names now (after the store created or found it)."""
        self._identity = self._stat()

    @contextmanager
    def writer(self) -> Iterator[sqlite3.Connection]:
        """The process's writer connection, outside any transaction (the schema script)."""
        lease = _Lease(self)
        try:
            yield lease.take(write=True)
        finally:
            lease.give_back()

    @contextmanager
    def transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        """One transaction: ``BEGIN IMMEDIATE`` on the writer connection (``write``), or a
        deferred read (a WAL snapshot) on the writer's if no write holds it (its page cache
        is current after this process's writes), else on a reader's: a read never waits.
        sqlite3 errors become StoreUnavailableError, rolled back: nothing changed."""
        lease = _Lease(self)  # one flat manager: every store operation goes through it
        try:
            connection = lease.take(write=write)
            try:  # BEGIN inside: giving the lease back rolls back whatever is still open
                connection.execute("BEGIN IMMEDIATE" if write else "BEGIN")
                yield connection
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc
            try:
                connection.execute("COMMIT")
            except sqlite3.Error as exc:
                raise StoreUnavailableError(f"the SQLite store could not commit: {exc}") from exc
        finally:
            lease.give_back()

    def rows(self, sql: str, parameters: Sequence[object]) -> list[Any]:
        """One read statement, in autocommit (its own snapshot): the cheapest read, for
        polls. On the writer connection if no write holds it, else a reader's."""
        lease = _Lease(self)
        try:
            return lease.take(write=False).execute(sql, parameters).fetchall()
        except sqlite3.Error as exc:
            raise StoreUnavailableError(f"the SQLite store is unavailable: {exc}") from exc
        finally:
            lease.give_back()

    def close(self) -> None:
        """Close the idle connections (those in use close when given back and dropped)."""
        while True:
            quiet = Event()
            with self._lock:
                if not self._inside:
                    connections, self._idle = self._idle, []
                    writer, self._writer = self._writer, None
                    self._opened = 0
                    break
                self._quiet_waiters.append(quiet)
            quiet.wait(_WAKE_S)
        for connection in [*connections, *([writer] if writer is not None else [])]:
            connection.close()

    # -- inside --

    def _wait_out_fork(self) -> None:
        forked = Event()
        with self._lock:
            if not self._forking:
                return
            self._fork_waiters.append(forked)
        forked.wait(_WAKE_S)

    def _wait_for_reader(self) -> None:
        freed = Event()
        with self._lock:
            if self._idle or self._opened < READERS:
                return
            self._reader_waiters.append(freed)
        freed.wait(_WAKE_S)

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
        with self._lock:
            self._forking = True
        while True:
            quiet = Event()
            with self._lock:
                if not self._inside:
                    return
                self._quiet_waiters.append(quiet)
            quiet.wait(_WAKE_S)

    def _after_fork(self) -> None:
        with self._lock:
            self._forking = False
            waiters, self._fork_waiters = self._fork_waiters, []
        _wake(waiters)


class _Lease:
    """What one store call took from a pool: :meth:`take` records each thing in call-free
    statements right after taking it (so a signal never separates the two), and
    :meth:`give_back` undoes exactly what is recorded, each step reset before its one C call.
    A signal that skips the ``finally`` calling it (or a generator ended at its ``yield``)
    leaves the record to ``__del__``, when the frame holding the lease goes."""

    __slots__ = ("pool", "inside", "maybe_writer", "slot", "connection")

    def __init__(self, pool: Connections) -> None:
        self.pool = pool
        self.inside = False  # counted in pool._inside (taken first, given back last)
        self.maybe_writer = False  # the write lock may be held: released owner-checked
        self.slot = False  # a reader slot counted in pool._opened
        self.connection: sqlite3.Connection | None = None

    def take(self, *, write: bool) -> sqlite3.Connection:
        """``write``: the writer connection (waiting for this process's other writes); else
        the writer's if no write holds it, else a reader's."""
        pool = self.pool
        if pool._pid != os.getpid():  # forked without the at-fork hook (it always runs)
            pool._inherit()
        while True:
            with pool._lock:
                if not pool._forking:
                    pool._inside += 1
                    self.inside = True
                    break
            pool._wait_out_fork()
        if write:  # a write to a deleted file would be lost: checked (3-4 us) each time
            pool._check_file()
        self.maybe_writer = True
        if write:
            if not pool._write_lock.acquire(timeout=pool._busy_timeout_s):
                self.maybe_writer = False
                raise StoreUnavailableError(
                    "the SQLite store is unavailable: this process's other writes held it "
                    f"past the busy timeout ({pool._busy_timeout_s} s)"
                )
        elif not pool._write_lock.acquire(blocking=False):
            self.maybe_writer = False
            while True:
                with pool._lock:
                    if pool._idle:
                        self.connection = pool._idle[-1]
                        del pool._idle[-1]
                        self.slot = True
                        break
                    if pool._opened < READERS:
                        pool._opened += 1
                        self.slot = True
                        break
                pool._wait_for_reader()
            if self.connection is None:
                self.connection = pool._connect()
            return self.connection
        if pool._writer is None:
            pool._writer = pool._connect()
        self.connection = pool._writer
        return self.connection

    def give_back(self) -> None:
        """Roll back what is still open, then give back what :meth:`take` recorded."""
        pool = self.pool
        connection = self.connection
        if connection is not None and connection.in_transaction:
            _rollback(connection)
        self.connection = None  # before it goes back: a retry never touches it again
        if self.maybe_writer:
            self.maybe_writer = False
            try:
                pool._write_lock.release()
            except RuntimeError:  # a signal on the acquire's return: it had not taken it
                pass
        if self.slot:
            waiters: list[Event] = []
            with pool._lock:
                self.slot = False
                if connection is not None:
                    pool._idle.append(connection)
                else:  # the reader could not be opened: its slot is free again
                    pool._opened -= 1
                if pool._reader_waiters:
                    waiters, pool._reader_waiters = pool._reader_waiters, []
            _wake(waiters)
        if self.inside:
            quiet: list[Event] = []
            with pool._lock:
                self.inside = False
                pool._inside -= 1
                if not pool._inside and pool._quiet_waiters:
                    quiet, pool._quiet_waiters = pool._quiet_waiters, []
            _wake(quiet)

    def __del__(self) -> None:
        if self.inside:  # given back last: anything taken is still recorded
            self.give_back()


_WAKE_S = 0.05
"""The longest a waiting thread sleeps before it looks again (a wake-up a signal lost)."""


def _wake(waiters: list[Event]) -> None:
    for waiter in waiters:
        waiter.set()


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
