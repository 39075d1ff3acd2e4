"""``revoke`` reaches the run: a revoked task's run is cancelled in the process that runs it.

Celery's worker keeps the revoked ids in its main process (``celery.worker.state.revoked``)
but tells a running task nothing: ``task_revoked`` fires for a running task only when it is
terminated, a prefork pool process never sees that set, the threads pool cannot terminate,
and the solo pool's worker reads no control message while its task runs (the task runs in
its loop). So every process that runs tasks reads the revokes itself, as the workers do:
one daemon thread, one broker connection and a queue of its own bound to Celery's control
exchange (the fanout ``celery.pidbox``), reading each ``revoke`` and ``terminate`` as it is
broadcast (:func:`listen`). Idle, it waits in one blocking read; a revoke wakes it at once.

The rule, in one place (:class:`Revokes`): a revoked id and a running task meet under one
lock, whichever comes first. A revoke of a task that runs here cancels its run's token at
once (its run ends cancelled, its history valid, its log closed, within the usual
milliseconds); an id revoked before its task starts here is remembered (a bounded set, the
newest kept), and the task ends at once when it starts. A ``revoke`` addressed to other
workers (``destination=[...]``) is left to them.
"""

from __future__ import annotations

import itertools
import logging
import threading
import uuid
from collections import OrderedDict
from collections.abc import Iterable
from importlib import import_module
from typing import Any, Final

from ..cancel import CancelToken

__all__ = ["REVOKED_REASON", "TERMINATED_REASON", "Revokes", "listen", "revokes"]

logger = logging.getLogger(__name__)

TERMINATED_REASON: Final = "task terminated"
"""The ``cancel_reason`` of a run whose task was terminated (``revoke(terminate=True)``, or
the pool process stopped while it ran)."""

REVOKED_REASON: Final = "task revoked"
"""The ``cancel_reason`` of a run whose task was revoked (``revoke(task_id)``) as it ran."""

_KEPT: Final = 10_000  # revoked ids remembered for tasks not started here yet
_READ_S: Final = 5.0  # the blocking read's bound (the loop then reads again)
_READY_S: Final = 5.0  # how long the first task waits for the listener to be subscribed
_RETRY_S: Final = (0.5, 1.0, 2.0, 5.0)  # waits before connecting again after a failure


class Revokes:
    """The revoked ids and the runs of this process's running tasks. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: dict[str, CancelToken] = {}
        self._revoked: OrderedDict[str, str] = OrderedDict()  # id -> cancel reason
        self.pool_terminates = False
        """Whether Celery's worker terminates this process's task on ``revoke(terminate=True)``
        (a prefork pool process; the threads and solo pools cannot): Celery's view of such a
        task is then ``REVOKED``, as :func:`ended` tells the task."""

    def running(self, task_id: str, token: CancelToken) -> str | None:
        """Note that ``task_id`` runs here with ``token``; the cancel reason if it was
        revoked already (then it is not noted: the task ends at once)."""
        with self._lock:
            reason = self._revoked.get(task_id)
            if reason is None:
                self._running[task_id] = token
            return reason

    def ended(self, task_id: str) -> bool:
        """The task no longer runs here; whether it ends ``REVOKED`` in Celery's view: its
        run was cancelled by a ``revoke(terminate=True)`` that Celery carries out here too
        (:attr:`pool_terminates`). Its worker's main process then marks it ``REVOKED`` and
        signals this process, and the task, which usually ends first (its run ends within
        milliseconds), must not store a result over that mark (Celery's result backends
        keep only ``SUCCESS`` from being overwritten)."""
        with self._lock:
            self._running.pop(task_id, None)
            reason = self._revoked.pop(task_id, None)
        return self.pool_terminates and reason == TERMINATED_REASON

    def revoke(self, task_ids: Iterable[str], reason: str) -> None:
        """Cancel the runs of those tasks that run here; remember every id (a task not
        started here yet ends at once when it starts)."""
        tokens = []
        with self._lock:
            for task_id in task_ids:
                token = self._running.get(task_id)
                if token is not None:
                    tokens.append((task_id, token))
                self._revoked[task_id] = reason  # a running task's too, for ended()
                self._revoked.move_to_end(task_id)
                while len(self._revoked) > _KEPT:
                    self._revoked.popitem(last=False)
        for task_id, token in tokens:  # outside the lock: cancel calls callbacks
            if token.cancel(reason):
                logger.info("run_id=<%s> | the task was revoked: its run is cancelled", task_id)


revokes = Revokes()
"""This process's revokes (each prefork pool process has its own)."""

_listening: tuple[int, threading.Event] | None = None  # (pid, subscribed) of the listener
_listen_lock = threading.Lock()
_threads = itertools.count(1)


def listen(app: Any, hostname: str | None) -> None:
    """Read the revokes broadcast to ``app``'s workers in this process from now on (once per
    process; a forked child starts its own). Returns once subscribed (bounded: a broker
    that does not answer is logged, and the thread goes on trying)."""
    import os

    global _listening
    with _listen_lock:
        if _listening is not None and _listening[0] == os.getpid():
            subscribed = _listening[1]
        else:
            subscribed = threading.Event()
            _listening = (os.getpid(), subscribed)
            threading.Thread(
                target=_listen_forever,
                args=(app, hostname, subscribed),
                name=f"agent-sync-celery-revokes-{next(_threads)}",
                daemon=True,  # one blocking read: nothing to finish
            ).start()
    if not subscribed.wait(_READY_S):
        logger.warning("revokes are not read yet: the broker did not answer in time")


def _listen_forever(app: Any, hostname: str | None, subscribed: threading.Event) -> None:
    kombu: Any = import_module("kombu")
    mailbox = app.control.mailbox
    queue = kombu.Queue(
        f"agent_sync.revokes.{uuid.uuid4().hex}.{mailbox.namespace}.pidbox",
        exchange=mailbox.exchange,
        durable=False,
        auto_delete=True,
        no_ack=True,
    )
    accept = sorted({"json", mailbox.serializer or "json"})
    failures = 0
    wake = threading.Event()  # never set: a bounded wait between retries
    while True:
        try:
            with app.connection_for_read() as connection:
                callbacks = [lambda body, _message: _on_control(body, hostname)]
                with kombu.Consumer(connection, [queue], callbacks=callbacks, accept=accept):
                    _read(connection, subscribed)
                    failures = 0
        except Exception:
            subscribed.set()  # the tasks do not wait for a broker that is down
            logger.warning("revokes are not read: the broker failed", exc_info=True)
            wake.wait(_RETRY_S[min(failures, len(_RETRY_S) - 1)])
            failures += 1


def _read(connection: Any, subscribed: threading.Event) -> None:
    """Read control messages until the connection fails. The first read subscribes (the
    Redis transport subscribes when it first polls); then the tasks may rely on it."""
    timeout = 0.05
    while True:
        try:
            connection.drain_events(timeout=timeout)
        except TimeoutError:
            pass
        subscribed.set()
        timeout = _READ_S


def _on_control(body: Any, hostname: str | None) -> None:
    """One broadcast control message: act on ``revoke`` and ``terminate``."""
    if not isinstance(body, dict) or body.get("method") not in ("revoke", "terminate"):
        return
    destination = body.get("destination")
    if destination and not body.get("pattern") and hostname and hostname not in destination:
        return  # addressed to other workers
    arguments = body.get("arguments") or {}
    task_ids = arguments.get("task_id")
    if isinstance(task_ids, str):
        task_ids = [task_ids]
    if not isinstance(task_ids, list):
        return
    terminate = body["method"] == "terminate" or bool(arguments.get("terminate"))
    reason = TERMINATED_REASON if terminate else REVOKED_REASON
    revokes.revoke([str(task_id) for task_id in task_ids], reason)
