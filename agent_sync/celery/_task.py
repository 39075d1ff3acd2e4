"""One ``run_task``: the conversation's run, owned by this worker, published to its log.

The task builds the agent, starts the run under the task's id and publishes its records as
the chat routes do (:class:`~agent_sync._run_log._publish.Publisher`), then waits in the task's
thread for the run to be over or paused. Whatever stops it ends the run first, cancelled
with a valid history and a closed log: a revoke read by :mod:`._revokes` (its token), the
task interrupted (``SystemExit`` of a terminated pool process, a soft time limit), or a
revoke or a Stop that came before the task started (its log is then closed here, or was
closed by the Stop: the run never starts).
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Final, NoReturn

from .._prompt import content_blocks
from .._run_log._publish import REPLAY_TTL_S, Publisher
from .._run_log._records import closing_record, error_record, run_record
from .._signal_safe import Event
from ..cancel import CancelToken
from ..errors import ConcurrentInvocationError, PendingApprovalError, UsageError
from ..run._handle import AgentStream
from ..stores._event_log import EventLogStore
from ..web._http import valid_id
from ._config import Config
from ._revokes import TERMINATED_REASON, revokes

if TYPE_CHECKING:
    from ..agent import Agent

__all__ = ["REVOKED_RECORD", "append_end", "run"]

logger = logging.getLogger(__name__)

_END_GRACE_S: Final = 30.0
"""How long a task that is interrupted (terminated) waits for its cancelled run to end."""
_INTERRUPTED: Final = "task interrupted"
REVOKED_RECORD: Final = {
    "type": "error",
    "error": "Revoked",
    "message": "the answer was revoked before it started",
    "retryable": False,
}


def run(
    config: Config,
    conversation_id: str,
    prompt: Any,
    run_id: str,
    timeout: float | None,
    task: Any = None,
) -> dict[str, Any]:
    """Run the conversation's agent on ``prompt`` under ``run_id`` (see the module
    docstring); ``{"run_id", "status", "stop_reason"}`` once it is over or paused.
    ``task``, the Celery task running it, ends ``REVOKED`` as Celery would end it (not the
    ``STARTED`` it was given, nor a summary stored over Celery's mark) when the run never
    starts because the task was revoked, and when a ``revoke(terminate=True)`` that Celery
    carries out in this process cancelled the run (a prefork pool process)."""
    if not isinstance(conversation_id, str) or not valid_id(conversation_id):
        raise UsageError("conversation_id must be a str of letters, digits and . _ ~ @ + = -")
    if not valid_id(run_id):
        raise UsageError("the task id (the run's id) must be letters, digits and . _ ~ @ + = -")
    agent: Agent | None = None
    store = config.store
    if store is None:  # not named to configure: learned from the first task's agent
        agent = config.make_agent(conversation_id)
        store = config.store_of(agent)
    logged = store.read_events(run_id)
    opened = [run_record(run_id, conversation_id)]
    if [event.data for event in logged] not in ([], opened) or store.get(run_id) is not None:
        # Delivered again (a redelivered message), or stopped before it started: the run
        # started once, or never will.
        logger.warning("run_id=<%s> | the run was started or stopped before; not again", run_id)
        return _summary(store, run_id)
    after = len(logged)  # 1: the web opened the log (chat_blueprint's start=)
    first = [] if logged else opened
    token = CancelToken()
    if revokes.running(run_id, token) is not None or _revoked_by_celery(run_id):
        revokes.ended(run_id)
        append_end(store, run_id, first, after, dict(REVOKED_RECORD))
        _end_revoked(task, run_id, "revoked")
    try:
        summary = _publish(
            config, store, agent, conversation_id, prompt, run_id, timeout, token, first, after
        )
    finally:
        terminated = revokes.ended(run_id)
    if terminated:  # the run ended cancelled; Celery's view is a terminated task
        _end_revoked(task, run_id, "terminated")
    return summary


def _publish(
    config: Config,
    store: EventLogStore,
    agent: Agent | None,
    conversation_id: str,
    prompt: Any,
    run_id: str,
    timeout: float | None,
    token: CancelToken,
    first: list[dict[str, Any]],
    after: int,
) -> dict[str, Any]:
    stream: AgentStream | None = None
    publisher: Publisher | None = None
    ended: Event | None = None
    try:
        content_blocks(prompt)
        if agent is None:
            agent = config.make_agent(conversation_id)
            config.store_of(agent)
        stream = agent._stream_as(run_id, prompt, timeout=timeout, cancel=token)
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
    append_end(store, run_id, first, after, record)


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


def _end_revoked(task: Any, run_id: str, why: str) -> NoReturn:
    """End the task as Celery ends one it revoked: its result stored ``REVOKED`` (``why``,
    Celery's reason: ``"revoked"`` or ``"terminated"``) and nothing stored after it. A task
    that never started its run was marked ``STARTED`` as it began (``track_started``), so a
    worker's main process that reads the revoke later leaves its state alone; a terminated
    one is marked by the main process too, in an order nobody controls. A failure to store
    is logged."""
    from celery.exceptions import Ignore  # type: ignore[import-untyped]

    if task is not None:
        try:
            task.backend.mark_as_revoked(run_id, why, request=task.request)
        except Exception:
            logger.warning("run_id=<%s> | the revoked task's result was not stored", run_id)
    raise Ignore()


def _revoked_by_celery(task_id: str) -> bool:
    """Whether this process's Celery worker state has the task revoked (the threads pool
    may hold a task queued while its revoke comes)."""
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


def append_end(
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
