"""Background runs on Celery: a run owned by a Celery worker, followed from any web worker.

Needs the ``celery`` extra (``pip install 'agent_sync[celery]'``). In the worker's app
module, at import (the web processes that send tasks may import it too)::

    from celery import Celery
    from agent_sync.celery import configure

    app = Celery("chat", broker="redis://...")
    configure(make_agent)        # how this worker builds agents; it also recovers lost runs

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
store. ``app.control.revoke(run_id, terminate=True)`` on the prefork pool (Celery's
default) sends the task's pool process ``SIGTERM``, which the pool turns into a
``SystemExit`` in the task (so that ``finally`` blocks run); the task then cancels its run
(reason :data:`TERMINATED_REASON`), waits until it has ended with a valid history and its
log's ``done`` record, and lets the process exit, as Celery expects of a terminated task.
A revoke that reaches a task before it started closes the run's log. Celery's threads and
solo pools cannot terminate a running task (Celery refuses there): stop runs with
``store.cancel``. Anything else raised in the task while it waits (a soft time limit)
cancels the run the same way.

**Lost runs.** With ``Agent(..., on_owner_lost="resume")``, the processes that run tasks
(prefork pool processes, or the worker itself with the threads or solo pool) take over the
store's runs whose worker died, once they have started: a pool process killed mid-run has
its run go on in another (same run id, same event log), as ``docs/recovery.md`` says.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

from ._extras import missing_extra

try:
    from celery import shared_task  # type: ignore[import-untyped]
    from celery import signals as celery_signals
    from celery.exceptions import Ignore  # type: ignore[import-untyped]
except ImportError as exc:  # pragma: no cover - the extra is installed wherever tests run
    raise missing_extra("celery", "celery") from exc

from ._prompt import content_blocks
from ._signal_safe import Event
from .cancel import CancelToken
from .errors import ConcurrentInvocationError, PendingApprovalError, UsageError
from .run._driver import new_run_id
from .run._handle import AgentStream
from .run._settings import UNSET
from .stores import RunEventLog, RunStore
from .stores._event_log import EventLogStore
from .web._http import valid_id
from .web._publish import REPLAY_TTL_S, Publisher
from .web._records import closing_record, error_record, run_record

if TYPE_CHECKING:
    from .agent import Agent

__all__ = ["TERMINATED_REASON", "configure", "run_task"]

logger = logging.getLogger(__name__)

MakeAgent = Callable[[str], "Agent"]

TERMINATED_REASON: Final = "task terminated"
"""The ``cancel_reason`` of a run whose task was terminated (``revoke(terminate=True)``, or
the pool process stopped while it ran)."""

_END_GRACE_S: Final = 30.0
"""How long a task that is interrupted (terminated) waits for its cancelled run to end."""
_INTERRUPTED: Final = "task interrupted"
_REVOKED: Final = {
    "type": "error",
    "error": "Revoked",
    "message": "the answer was revoked before it started",
    "retryable": False,
}
_PROBE_CONVERSATION: Final = "agent_sync-celery-configure"
"""The conversation ``configure`` builds one agent of (read only), to learn the agents'
store and ``on_owner_lost``."""


@dataclass(frozen=True)
class _Config:
    make_agent: MakeAgent
    store: EventLogStore
    resume: bool  # the agents resume lost runs (on_owner_lost="resume")


_config: _Config | None = None
_worker_pid: int | None = None  # the worker's main process (worker_init)


def configure(make_agent: MakeAgent, *, store: EventLogStore | None = None) -> None:
    """Say how this Celery worker builds agents; call it in the app module, at import.

    Builds one agent (of the conversation ``"agent_sync-celery-configure"``, which it
    only reads) to learn the agents' store and whether they resume lost runs
    (``on_owner_lost="resume"``); records ``make_agent`` for :data:`run_task`; and
    connects to Celery's worker signals: then the processes that run tasks take over the
    store's lost runs from their start (when the agents resume them), and a revoked task
    that never started closes its run's log (see the module docstring). Nothing is
    started at import: Celery's prefork pool forks after it, and a thread started before
    a fork does not exist in the child.

    Args:
        make_agent: ``conversation_id -> Agent`` on one store (``Agent(model, ...,
            store=store, conversation_id=conversation_id)``), called for every task.
        store: The agents' store, if you want it checked; by default theirs.

    Raises:
        UsageError: ``make_agent`` is not callable or builds agents without a store (or
            on another store than ``store``), or the store is not one of the package's
            (it must keep the runs' event logs).
    """
    global _config
    if not callable(make_agent):
        raise UsageError("make_agent must be a callable conversation_id -> Agent")
    agent = make_agent(_PROBE_CONVERSATION)
    agents_store = getattr(agent, "_store", None)
    if agents_store is None or (store is not None and agents_store is not store):
        raise UsageError(
            "make_agent must build agents on the store "
            "(Agent(..., store=store, conversation_id=conversation_id))"
        )
    store = agents_store
    if not isinstance(store, RunStore) or not isinstance(store, RunEventLog):
        raise UsageError(
            "store must be a store of agent_sync.stores that keeps event logs "
            f"(SQLiteRunStore, RedisRunStore), got {type(store).__name__}"
        )
    _config = _Config(make_agent, store, agent._settings.on_owner_lost == "resume")
    for signal_, receiver in (
        (celery_signals.worker_init, _on_worker_init),
        (celery_signals.worker_process_init, _on_pool_process_init),
        (celery_signals.worker_ready, _on_worker_ready),
        (celery_signals.task_revoked, _on_task_revoked),
    ):
        signal_.connect(receiver, weak=False, dispatch_uid=f"agent_sync.celery.{receiver.__name__}")


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
    run_id = task.request.id or new_run_id()  # no id: the task was called, not sent
    return _run(_configured(), conversation_id, prompt, run_id, timeout)


run_task: Any = shared_task(name="agent_sync.celery.run_task", bind=True)(_run_task)
"""The Celery task that runs one run: ``run_task.delay(conversation_id, prompt)`` (see
:func:`_run_task` for its arguments and result). A shared task: sent and run with the
current Celery app."""


def _configured() -> _Config:
    config = _config
    if config is None:
        raise UsageError(
            "agent_sync.celery.configure(make_agent) was not called in this worker "
            "(call it in the Celery app's module, at import)"
        )
    return config


def _run(
    config: _Config, conversation_id: str, prompt: Any, run_id: str, timeout: float | None
) -> dict[str, Any]:
    if not isinstance(conversation_id, str) or not valid_id(conversation_id):
        raise UsageError("conversation_id must be a str of letters, digits and . _ ~ @ + = -")
    if not valid_id(run_id):
        raise UsageError("the task id (the run's id) must be letters, digits and . _ ~ @ + = -")
    store = config.store
    logged = store.read_events(run_id)
    opened = [run_record(run_id, conversation_id)]
    if [event.data for event in logged] not in ([], opened) or store.get(run_id) is not None:
        # Delivered again (a redelivered message): the run started once; never twice.
        logger.warning("run_id=<%s> | the run was started before; not again", run_id)
        return _summary(store, run_id)
    after = len(logged)  # 1: the web opened the log (chat_blueprint's start=)
    first = [] if logged else opened
    if _revoked_here(run_id):  # revoked while it waited in this process's pool
        _append_end(store, run_id, first, after, dict(_REVOKED))
        raise Ignore()
    token = CancelToken()
    stream: AgentStream | None = None
    publisher: Publisher | None = None
    ended: Event | None = None
    try:
        content_blocks(prompt)
        agent = config.make_agent(conversation_id)
        if getattr(agent, "_store", None) is not store:
            raise UsageError("make_agent must build agents on the configured store")
        call = agent._call(timeout, UNSET, token, UNSET, None, UNSET)
        stream = agent._open(prompt, call, emit_deltas=True, face=AgentStream, run_id=run_id)
        publisher = Publisher(
            store, stream, run_id=run_id, first=first, after=after, replay_ttl=REPLAY_TTL_S
        )
        ended = _end_of(publisher)
        ended.wait()  # the run is over or paused, its records appended
    except BaseException as exc:
        if publisher is None:
            _not_started(store, run_id, first, after, stream, exc)
        else:
            _interrupted(token, publisher, ended, exc)
        raise
    return _summary(store, run_id)


def _not_started(
    store: EventLogStore,
    run_id: str,
    first: list[dict[str, Any]],
    after: int,
    stream: AgentStream | None,
    exc: BaseException,
) -> None:
    """The run could not start (refused, or the task was stopped first): end its log. A
    run begun but not published yet is ended here (cancelled, its history valid)."""
    record = _refusal_record(exc)
    if stream is not None:
        stream.close()
        snapshot = store.get(run_id)
        if snapshot is not None:
            record = closing_record(snapshot)
    _append_end(store, run_id, first, after, record)


def _interrupted(
    token: CancelToken, publisher: Publisher, ended: Event | None, exc: BaseException
) -> None:
    """Something was raised in the task while its run went on: ``SystemExit`` when the
    pool process was told to stop (``revoke(terminate=True)``), or a soft time limit.
    The run ends first: cancelled, its history valid and its log closed."""
    reason = TERMINATED_REASON if isinstance(exc, SystemExit) else _INTERRUPTED
    if token.cancel(reason):
        logger.warning(
            "run_id=<%s> | the task was interrupted (%s): the run is cancelled",
            publisher.run_id,
            type(exc).__name__,
        )
    if ended is not None:
        ended.wait(_END_GRACE_S)
    else:
        publisher.join(_END_GRACE_S)


def _end_of(publisher: Publisher) -> Event:
    """An event set once the publisher's thread has ended, waited for in a thread of its
    own: the task's thread gets signals (a terminated pool process's ``SystemExit``), and
    a ``Thread.join`` that an exception interrupts may take the thread for ended while it
    runs (CPython releases the thread's lock it was waiting for); ``Event.wait`` holds
    nothing when interrupted."""
    ended = Event()

    def wait() -> None:
        publisher.thread.join()
        ended.set()

    name = f"{publisher.thread.name}-end"
    threading.Thread(target=wait, name=name, daemon=True).start()
    return ended


def _revoked_here(task_id: str) -> bool:
    """Whether this process knows the task was revoked: Celery skips a revoked task
    before it reaches the pool, but the threads pool may hold it queued meanwhile (a
    prefork pool process never learns of revokes: its worker's ``task_revoked`` does)."""
    from celery.worker import state  # type: ignore[import-untyped]

    return task_id in state.revoked


def _summary(store: EventLogStore, run_id: str) -> dict[str, Any]:
    snapshot = store.get(run_id)
    if snapshot is None:
        return {"run_id": run_id, "status": None, "stop_reason": None}
    return {"run_id": run_id, "status": snapshot.status, "stop_reason": snapshot.stop_reason}


def _refusal_record(exc: BaseException) -> dict[str, Any]:
    """The log's end for a run that could not start, safe to show."""
    if isinstance(exc, ConcurrentInvocationError):
        error, message = "Busy", "this conversation is still answering; stop it or wait"
    elif isinstance(exc, PendingApprovalError):
        error, message = "Paused", "this conversation waits for a decision"
    elif isinstance(exc, UsageError):
        error, message = "BadRequest", str(exc)
    elif isinstance(exc, (SystemExit, KeyboardInterrupt)):
        error, message = "Stopped", "the answer was stopped before it started"
    else:
        return error_record(exc)  # a model or store error as such, anything else generic
    return {"type": "error", "error": error, "message": message, "retryable": False}


def _append_end(
    store: EventLogStore,
    run_id: str,
    first: list[dict[str, Any]],
    after: int,
    record: dict[str, Any],
) -> None:
    """End a log that nobody else writes (a compare-and-set: never after a record it has
    not seen); a failure is logged."""
    try:
        store.append_events(run_id, [*first, record], after=after, keep_s=REPLAY_TTL_S)
    except Exception:
        logger.warning("run_id=<%s> | the run's log could not be closed", run_id, exc_info=True)


# -- the worker's signals --


def _on_worker_init(**_: Any) -> None:
    """The worker's main process, before its pool starts."""
    global _worker_pid
    _worker_pid = os.getpid()


def _on_pool_process_init(**_: Any) -> None:
    """A prefork pool process has started (the solo pool sends it in the worker itself,
    which :func:`_on_worker_ready` handles)."""
    if os.getpid() != _worker_pid:
        _start_recovering()


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    """The worker's main process is ready: it recovers lost runs itself when its pool runs
    tasks in it (threads, solo); a prefork pool's processes recover theirs."""
    from celery.concurrency.prefork import TaskPool as PreforkPool  # type: ignore[import-untyped]

    if not isinstance(getattr(sender, "pool", None), PreforkPool):
        _start_recovering()


def _start_recovering() -> None:
    """Take over the store's lost runs from now on, in this process, if the agents resume
    them; a failure is logged and leaves the worker running tasks."""
    config = _config
    if config is None or not config.resume:
        return
    from ._recovery import keep_recovering

    try:
        keep_recovering(config.store, config.make_agent)
    except Exception:
        logger.exception("this worker process does not recover lost runs")


def _on_task_revoked(sender: Any = None, request: Any = None, **_: Any) -> None:
    """In the worker's main process: a revoked task that never started its run leaves a
    log that only the web opened; end it, so its streams end."""
    config = _config
    run_id = getattr(request, "id", None)
    if config is None or getattr(sender, "name", None) != run_task.name or not run_id:
        return
    try:
        logged = config.store.read_events(run_id)
        if len(logged) != 1 or logged[0].data.get("type") != "run":
            return  # not a log the web opened, or its run writes it
        if config.store.get(run_id) is not None:
            return  # the run started: it ends its log (terminated: cancelled)
    except Exception:
        logger.warning("run_id=<%s> | the revoked run's log was not checked", run_id)
        return
    _append_end(config.store, run_id, [], 1, dict(_REVOKED))
