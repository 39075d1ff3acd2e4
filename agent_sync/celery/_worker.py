"""The worker's side: Celery's worker signals, received in the processes that run tasks.

A process that runs tasks (a prefork pool process, or the worker itself with the threads
or solo pool) reads revokes from its start (:func:`._revokes.listen`) and, once it knows
the agents' store (named to ``configure``, or learned at its first task), takes over the
store's lost runs (:func:`agent_sync.stores._recovery.keep_recovering`: only runs of agents with
``on_owner_lost="resume"`` are ever lost, so it costs one cheap poll otherwise). Nothing
starts at import: Celery's prefork pool forks after it, and a thread started before a fork
does not exist in the child. The worker's main process also closes the log of a task
revoked before it started (``task_revoked``), so the run's streams end.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from celery import signals as celery_signals  # type: ignore[import-untyped]

from ..stores._event_log import EventLogStore
from ._config import current
from ._revokes import listen, revokes
from ._task import REVOKED_RECORD, append_end

__all__ = ["connect", "store_known", "task_starts"]

logger = logging.getLogger(__name__)

_worker_pid: int | None = None  # the worker's main process (worker_init)
_hostname: str | None = None  # the worker's node name (revokes may be addressed to it)
_runs_tasks: int | None = None  # the pid of this process, once it runs tasks
_TASK_NAME = "agent_sync.celery.run_task"


def connect() -> None:
    """Receive the worker's signals (idempotent)."""
    for signal_, receiver in (
        (celery_signals.worker_init, _on_worker_init),
        (celery_signals.worker_process_init, _on_pool_process_init),
        (celery_signals.worker_ready, _on_worker_ready),
        (celery_signals.task_revoked, _on_task_revoked),
    ):
        signal_.connect(receiver, weak=False, dispatch_uid=f"agent_sync.celery.{receiver.__name__}")


def task_starts(app: Any) -> None:
    """A ``run_task`` starts in this process: if it is a worker's, it reads revokes (the
    first task's start waits until it does). A task run outside a worker (``apply``)
    starts nothing."""
    if _runs_tasks == os.getpid():
        listen(app, _hostname)


def store_known(store: EventLogStore) -> None:
    """The agents' store is known (learned at the first task): recover its lost runs."""
    if _runs_tasks == os.getpid():
        _start_recovering(store)


def _on_worker_init(sender: Any = None, **_: Any) -> None:
    """The worker's main process, before its pool starts."""
    global _worker_pid, _hostname
    _worker_pid = os.getpid()
    _hostname = getattr(sender, "hostname", None)


def _on_pool_process_init(**_: Any) -> None:
    """A prefork pool process has started (the solo pool sends it in the worker itself,
    which :func:`_on_worker_ready` handles)."""
    if os.getpid() != _worker_pid:
        from celery import current_app

        revokes.pool_terminates = True  # the main process terminates its tasks here

        _runs_tasks_here(current_app._get_current_object())


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    """The worker's main process is ready: it runs tasks itself when its pool is not
    prefork (threads, solo); a prefork pool's processes do theirs."""
    from celery.concurrency.prefork import TaskPool as PreforkPool  # type: ignore[import-untyped]

    if not isinstance(getattr(sender, "pool", None), PreforkPool):
        _runs_tasks_here(sender.app)


def _runs_tasks_here(app: Any) -> None:
    global _runs_tasks
    _runs_tasks = os.getpid()
    try:
        listen(app, _hostname)
    except Exception:
        logger.exception("this worker process does not read revokes")
    config = current()
    if config is not None and config.store is not None:
        _start_recovering(config.store)


def _start_recovering(store: EventLogStore) -> None:
    """Take over the store's lost runs from now on, in this process; a failure is logged
    and leaves the worker running tasks."""
    config = current()
    if config is None:
        return
    from ..stores._recovery import keep_recovering

    try:
        keep_recovering(store, config.make_agent)
    except Exception:
        logger.exception("this worker process does not recover lost runs")


def _on_task_revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    """In the worker's main process: a revoked task that never started its run leaves a
    log that only the web opened; end it, so its streams end."""
    config = current()
    store = None if config is None else config.store
    run_id = getattr(request, "id", None)
    if store is None or getattr(sender, "name", None) != _TASK_NAME or not run_id:
        return
    try:
        logged = store.read_events(run_id)
        if len(logged) != 1 or logged[0].data.get("type") != "run":
            return  # not a log the web opened, or its run writes it
        if store.get(run_id) is not None:
            return  # the run started: it ends its log (terminated: cancelled)
    except Exception:
        logger.warning("run_id=<%s> | the revoked run's log was not checked", run_id)
        return
    append_end(store, run_id, [], 1, dict(REVOKED_RECORD))
