"""Background runs on Celery: a run owned by a Celery worker, followed from any web worker.

Needs the ``celery`` extra (``pip install 'agent_sync[celery]'``). In the worker's app
module, at import (the web processes that send tasks may import it too)::

    from celery import Celery
    from agent_sync.celery import configure

    app = Celery("chat", broker="redis://...")
    configure(make_agent, store=store)  # how this worker builds agents; it also recovers

Then, from any process where the app is set up::

    run_task.delay(conversation_id, prompt)          # the run's id is the task's id

or, to have ``POST /chat`` hand its runs to Celery and answer with their streams::

    app.set_default()  # web processes: Celery's current app is per thread
    chat_blueprint(make_agent, store=store, start=lambda cid, message, run_id:
                   run_task.apply_async((cid, message), task_id=run_id))

**The run.** :data:`run_task` builds the conversation's agent with the configured
``make_agent`` and runs it in the worker, publishing its events to the store's event log
as the chat routes do (the same records, so the routes' streams, reconnects, Stop,
decisions and inject work on it from any web worker). The task returns when the run is
over or paused, with ``{"run_id", "status", "stop_reason"}``. A paused run is resumed by
the web worker that takes the decision, as any paused run is.

**Stopping it.** ``store.cancel(run_id)`` (the routes' Stop) reaches the worker through the
store. ``app.control.revoke(run_id)``, with or without ``terminate=True``, on every pool
(prefork, threads, solo), cancels the run within milliseconds: each process that runs
tasks reads the revokes Celery broadcasts (:mod:`._revokes`), so the run ends cancelled
(reason :data:`REVOKED_REASON`, or :data:`TERMINATED_REASON` for ``terminate=True``) with a
valid history and its log's ``done`` record, and the task returns its summary (terminated
on the prefork pool: the task is ``REVOKED``, as Celery marks it). A task revoked, or
a run stopped from the routes, before its task started never runs: its log ends at once.
Anything else raised in the task while it waits (a soft time limit) cancels the run too.

**Lost runs.** With ``Agent(..., on_owner_lost="resume")``, the processes that run tasks
(prefork pool processes, or the worker itself with the threads or solo pool) take over the
store's runs whose worker died: from their start when ``configure`` is given ``store=``,
else from their first task (the store is learned from its agent). A pool process killed
mid-run has its run go on in another (same run id, same event log), as
``docs/recovery.md`` says.
"""

from __future__ import annotations

from typing import Any

from .._extras import missing_extra

try:
    from celery import shared_task  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise missing_extra("celery", "celery") from exc

from ..errors import UsageError
from ..run._driver import new_run_id
from ..stores._event_log import EventLogStore
from . import _worker
from ._config import Config, MakeAgent, check_store, configured, set_config
from ._revokes import REVOKED_REASON, TERMINATED_REASON
from ._task import run

__all__ = ["REVOKED_REASON", "TERMINATED_REASON", "configure", "run_task"]


def configure(make_agent: MakeAgent, *, store: EventLogStore | None = None) -> None:
    """Say how this Celery worker builds agents; call it in the app module, at import.

    Records ``make_agent`` for :data:`run_task` without calling it (an app's
    ``make_agent`` may look its conversation up), and connects to Celery's worker signals:
    the processes that run tasks read revokes from their start, and take over the store's
    lost runs of agents with ``on_owner_lost="resume"``; the worker closes the log of a
    task revoked before it started. Nothing connects to the store here (it may be down
    while the worker starts) and no thread starts at import (Celery's prefork pool forks
    after it; a thread started before a fork does not exist in the child).

    Args:
        make_agent: ``conversation_id -> Agent`` on one store (``Agent(model, ...,
            store=store, conversation_id=conversation_id)``), called for every task.
        store: The agents' store. Name it to have lost runs recovered (and revoked
            tasks' logs closed) from the worker's start; else it is learned from the
            first task's agent, in each process that runs tasks.

    Raises:
        UsageError: ``make_agent`` is not callable, or ``store`` is not one of the
            package's stores that keep event logs. A task whose agent is on no store, or
            on another store than the others, fails with ``UsageError`` (its log closed).
    """
    if not callable(make_agent):
        raise UsageError("make_agent must be a callable conversation_id -> Agent")
    checked = None if store is None else check_store(store)
    set_config(Config(make_agent, checked, _worker.store_known))
    _worker.connect()


def _run_task(
    task: Any, conversation_id: str, prompt: str | list[Any], *, timeout: float | None = None
) -> dict[str, Any]:
    """Run the conversation's agent on ``prompt`` in this worker (see the module docstring).

    The run's id is the task's id (``apply_async(..., task_id=run_id)``), so that the
    web, ``store.cancel`` and ``revoke`` name the same run.

    Args:
        conversation_id: The conversation.
        prompt: The user's message: text, or a list of content blocks (JSON).
        timeout: Seconds after which the run is cancelled with reason ``"timeout"``.

    Returns:
        ``{"run_id", "status", "stop_reason"}`` once the run is over or paused.

    Raises:
        UsageError: Invalid arguments, or ``configure`` was not called in this worker.
        ConcurrentInvocationError: The conversation runs elsewhere (its log says so too).
        PendingApprovalError: The conversation waits for a decision (likewise).
    """
    config = configured()
    _worker.task_starts(task.app)
    run_id = task.request.id or new_run_id()  # no id: the task was called, not sent
    return run(config, conversation_id, prompt, run_id, timeout, task)


run_task: Any = shared_task(name="agent_sync.celery.run_task", bind=True, track_started=True)(
    _run_task
)
"""The Celery task that runs one run: ``run_task.delay(conversation_id, prompt)`` (see
:func:`_run_task` for its arguments and result). A shared task: sent and run with the
current Celery app.

It is ``track_started``: its result is ``STARTED`` before its run starts. A worker's main
process that reads a revoke before it has seen its pool process accept the task (prefork
tells it later) marks a ``PENDING`` task ``REVOKED`` and leaves a started one to its
worker; the run is then cancelled where it runs and the task reports its summary."""
