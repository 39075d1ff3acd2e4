"""Runs owned by a real Celery worker (prefork with one pool process, or one thread),
followed and steered from the web routes in this process, on a Redis and a SQLite store.

The worker runs :mod:`tests.celery.worker_app`; its tools report to the test over a Unix
socket when they run (:class:`tests.celery.conftest.Probe`), and every wait is on that
report, an HTTP answer, a stream frame, the store's event log or a task result: nothing
sleeps.
"""

from __future__ import annotations

import functools
import os
import signal
import time
import types
import uuid
import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from agent_sync._run_log._records import is_terminal
from agent_sync.celery import REVOKED_REASON, TERMINATED_REASON, run_task
from agent_sync.messages import CANCELLED_TEXT, validate_history
from agent_sync.stores._event_log import EventLogStore
from tests.celery import agents
from tests.celery.conftest import Worker
from tests.fixtures.doubles import history_texts, tool_result_texts
from tests.web._client import SSEConnection, frames_until, request_json, serve

flask_module = pytest.importorskip("flask", reason="pip install -e '.[flask]'")


def send_to_celery(conversation_id: str, message: Any, run_id: str) -> None:
    """The routes' ``start=``: the run's id is the task's id."""
    run_task.apply_async((conversation_id, message), task_id=run_id)


@pytest.fixture(scope="module")
def web(worker: Worker) -> Iterator[int]:
    """The chat routes, handing every new run to the worker; yields the port."""
    from agent_sync.web.flask import chat_blueprint

    app = flask_module.Flask(__name__)
    make_agent = functools.partial(agents.make_agent, worker.store)
    app.register_blueprint(
        chat_blueprint(make_agent, store=worker.store, start=send_to_celery, keepalive=None),
        url_prefix="/api",
    )
    with serve(app) as server:
        yield server.server_port


def _cid() -> str:
    return f"c-{uuid.uuid4().hex[:10]}"


def _follow(store: EventLogStore, run_id: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """The run's log up to its last record (each read waits for the next append)."""
    records: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout
    while not records or not is_terminal(records[-1]):
        remaining = deadline - time.monotonic()
        assert remaining > 0, records
        events = store.read_events(run_id, after=len(records), timeout=min(remaining, 5.0))
        records += [event.data for event in events]
    return records


def test_post_chat_hands_the_run_to_the_worker_and_streams_it(worker: Worker, web: int) -> None:
    cid = _cid()
    conn = SSEConnection(web, "/api/chat", {"conversation_id": cid, "message": "hello"})
    try:
        assert conn.status == 200
        frames = frames_until(conn, "done")
    finally:
        conn.close()
    run_id = frames[0].data["run_id"]
    assert frames[0].event == "run" and frames[0].data["conversation_id"] == cid
    assert [f.id for f in frames] == [f"{run_id}:{n}" for n in range(1, len(frames) + 1)]
    assert frames[-1].data["stop_reason"] == "end_turn"
    answer = frames[-1].data["text"]
    assert answer.startswith("finished in ") and answer != f"finished in {os.getpid()}"
    summary = worker.app.AsyncResult(run_id).get(timeout=30)
    assert summary == {"run_id": run_id, "status": "done", "stop_reason": "end_turn"}
    messages = worker.store.load(cid).messages
    assert history_texts(messages) == ["hello", answer] and validate_history(messages) == []


def test_stop_and_inject_from_the_web_reach_the_run_in_the_worker(worker: Worker, web: int) -> None:
    cid = _cid()
    conn = SSEConnection(web, "/api/chat", {"conversation_id": cid, "message": f"wait {cid}"})
    try:
        run_id = frames_until(conn, "run")[-1].data["run_id"]
        assert worker.probe.started(cid) != os.getpid()  # the tool runs in the worker
        busy = request_json(web, "POST", "/api/chat", {"conversation_id": cid, "message": "hi"})
        assert busy[0] == 409 and busy[1]["error"] == "busy"
        status, queued = request_json(
            web, "POST", f"/api/runs/{run_id}/inject", {"content": "and this too"}
        )
        assert (status, queued["queued"]) == (202, True)
        status, stopped = request_json(web, "POST", f"/api/runs/{run_id}/stop", {})
        assert (status, stopped) == (200, {"cancelled": True})
        done = frames_until(conn, "done")[-1]
    finally:
        conn.close()
    assert done.data["stop_reason"] == "cancelled"
    summary = worker.app.AsyncResult(run_id).get(timeout=30)
    assert (summary["status"], summary["stop_reason"]) == ("cancelled", "cancelled")
    messages = worker.store.load(cid).messages
    assert validate_history(messages) == []
    assert tool_result_texts(messages) == [agents.TOLD]  # the waiting tool was told
    assert "and this too" in history_texts(messages)  # injected input is never lost
    assert messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}


def test_store_cancel_from_any_process_stops_a_task_sent_directly(worker: Worker) -> None:
    cid = _cid()
    result = run_task.delay(cid, f"wait {cid}")
    worker.probe.started(cid)
    assert worker.store.cancel(result.id, "stopped by user") is True
    assert result.get(timeout=30)["status"] == "cancelled"
    records = _follow(worker.store, result.id)
    assert records[0] == {"type": "run", "run_id": result.id, "conversation_id": cid}
    assert (records[-1]["type"], records[-1]["cancel_reason"]) == ("done", "stopped by user")
    assert validate_history(worker.store.load(cid).messages) == []


@pytest.mark.parametrize("terminate", [False, True], ids=["revoke", "terminate"])
def test_revoke_cancels_the_run_on_every_pool(worker: Worker, terminate: bool) -> None:
    cid = _cid()
    result = run_task.delay(cid, f"wait {cid}")
    worker.probe.started(cid)
    worker.app.control.revoke(result.id, terminate=terminate)
    records = _follow(worker.store, result.id)
    reason = TERMINATED_REASON if terminate else REVOKED_REASON
    assert records[-1]["type"] == "done"
    assert (records[-1]["stop_reason"], records[-1]["cancel_reason"]) == ("cancelled", reason)
    snapshot = worker.store.get(result.id)
    assert snapshot is not None and snapshot.status == "cancelled"
    messages = worker.store.load(cid).messages
    assert validate_history(messages) == [] and tool_result_texts(messages) == [agents.TOLD]
    result.get(timeout=30, propagate=False)
    if worker.pool == "prefork" and terminate:
        assert result.state == "REVOKED"  # Celery's view: terminated, as without agent_sync
    else:  # not terminated (Celery cannot on threads and solo): the task saw its run end
        assert result.result == {
            "run_id": result.id,
            "status": "cancelled",
            "stop_reason": "cancelled",
        }
    # The conversation goes on: in the same process, or (terminated, if the worker's main
    # process read the revoke before the task had ended) in the one Celery started in its
    # place, as test_a_killed_pool_process_s_run_goes_on_in_its_successor checks.
    after = run_task.delay(cid, "hello again").get(timeout=30)
    assert (after["status"], after["stop_reason"]) == ("done", "end_turn")
    assert history_texts(worker.store.load(cid).messages)[-1].startswith("finished in ")


def test_a_terminated_task_is_revoked_whether_it_ends_before_or_after_celery_marks_it(
    worker: Worker,
) -> None:
    # The race behind a red CI: revoke(terminate=True) on prefork reaches the worker's main
    # process (which marks the task REVOKED, then signals its pool process) and the pool
    # process's own reader (which cancels the run) at once. The task, over in milliseconds,
    # stored its summary as SUCCESS over Celery's mark when it ended first. Forced here: a
    # signal the pool process ignores, so the task always ends on its own, whenever the
    # main process's mark comes.
    if worker.pool != "prefork":
        pytest.skip("only a prefork pool process is terminated by Celery")
    cid = _cid()
    result = run_task.delay(cid, f"wait {cid}")
    pool_process = worker.probe.started(cid)
    worker.app.control.revoke(result.id, terminate=True, signal="SIGWINCH")
    records = _follow(worker.store, result.id)
    assert (records[-1]["type"], records[-1]["cancel_reason"]) == ("done", TERMINATED_REASON)
    assert validate_history(worker.store.load(cid).messages) == []
    # The next task runs in the same pool process (concurrency 1, not killed): the
    # terminated one has ended, and stored whatever it stores, before it starts.
    after = run_task.delay(cid, "hello again").get(timeout=30)
    assert after["status"] == "done"
    answer = history_texts(worker.store.load(cid).messages)[-1]
    assert answer == f"finished in {pool_process}"
    assert worker.app.AsyncResult(result.id).state == "REVOKED"


def test_a_revoke_read_before_the_worker_saw_the_task_start_still_reports_the_run(
    worker: Worker,
) -> None:
    # The race: a prefork worker's main process learns that its pool process accepted a task
    # by a message it reads later; a revoke it reads first finds the task not active, and
    # Celery marks it REVOKED if its backend state is PENDING, so the caller's get() raised
    # TaskRevokedError for a run that went on to end cancelled. Forced here: Celery's own
    # revoke handler, run in this process (where no task is active), while the run runs.
    from celery.worker import control

    cid = _cid()
    result = run_task.delay(cid, f"wait {cid}")
    worker.probe.started(cid)
    with warnings.catch_warnings():  # redis-py's on Celery's setex, as in the worker
        warnings.simplefilter("ignore", DeprecationWarning)
        control._revoke(types.SimpleNamespace(app=worker.app), [result.id])
    worker.app.control.revoke(result.id)  # the broadcast the run's process reads
    summary = result.get(timeout=30)  # not TaskRevokedError: the task ran, and reports
    assert summary == {"run_id": result.id, "status": "cancelled", "stop_reason": "cancelled"}
    records = _follow(worker.store, result.id)
    assert (records[-1]["type"], records[-1]["cancel_reason"]) == ("done", REVOKED_REASON)


def test_a_decision_resumes_the_worker_run_in_the_web_worker(worker: Worker, web: int) -> None:
    cid = _cid()
    conn = SSEConnection(web, "/api/chat", {"conversation_id": cid, "message": "ask"})
    try:
        frames = frames_until(conn, "approval_required")
        run_id, approval = frames[0].data["run_id"], frames[-1].data
        summary = worker.app.AsyncResult(run_id).get(timeout=30)
        assert (summary["status"], summary["stop_reason"]) == ("paused", "paused")
        status, answer = request_json(
            web,
            "POST",
            f"/api/runs/{run_id}/decisions",
            {"decisions": {approval["approval_id"]: True}},
        )
        assert (status, answer) == (202, {"run_id": run_id, "status": "running"})
        done = frames_until(conn, "done")[-1]
    finally:
        conn.close()
    assert done.data["stop_reason"] == "end_turn"
    assert done.data["text"] == f"finished in {os.getpid()}"  # resumed here, by the web
    messages = worker.store.load(cid).messages
    assert tool_result_texts(messages) == ["wiped /data"] and validate_history(messages) == []


def test_runs_revoked_or_stopped_before_they_started_end_their_streams(
    worker: Worker, web: int
) -> None:
    busy = _cid()
    holding = run_task.delay(busy, f"wait {busy}")  # the one pool process is busy
    worker.probe.started(busy)
    revoked, stopped = _cid(), _cid()
    conns = [
        SSEConnection(web, "/api/chat", {"conversation_id": cid, "message": "hello"})
        for cid in (revoked, stopped)
    ]
    try:
        run_ids = [frames_until(conn, "run")[-1].data["run_id"] for conn in conns]
        worker.app.control.revoke(run_ids[0])  # waits in the queue (or the worker's prefetch)
        status, answer = request_json(web, "POST", f"/api/runs/{run_ids[1]}/stop", {})
        assert (status, answer) == (200, {"cancelled": True})  # not 404: it was queued
        stopped_end = frames_until(conns[1], "error")[-1]  # at once, before its task starts
        assert worker.store.cancel(holding.id) is True
        assert holding.get(timeout=30)["status"] == "cancelled"
        revoked_end = frames_until(conns[0], "error")[-1]
        # the stopped run's task comes next, and ends at once: the run never starts
        assert worker.app.AsyncResult(run_ids[1]).get(timeout=30)["status"] is None
    finally:
        for conn in conns:
            conn.close()
    assert revoked_end.data["error"] == "Revoked" and stopped_end.data["error"] == "Stopped"
    for run_id, cid in zip(run_ids, (revoked, stopped), strict=True):
        assert worker.store.get(run_id) is None and not worker.store.load(cid).messages


def test_a_killed_pool_process_s_run_goes_on_in_its_successor(worker: Worker) -> None:
    if worker.pool != "prefork":
        pytest.skip("the threads pool runs in the worker itself: no process is left to go on")
    cid = _cid()
    result = run_task.delay(cid, f"wait {cid}")
    killed = worker.probe.started(cid)
    os.kill(killed, signal.SIGKILL)  # mid-tool: Celery starts another pool process
    records = _follow(worker.store, result.id, timeout=45)  # after the lease (3 s)
    assert [r["type"] for r in records].count("run") == 1  # one run, one log
    assert (records[-1]["type"], records[-1]["stop_reason"]) == ("done", "end_turn")
    snapshot = worker.store.get(result.id)
    assert snapshot is not None and snapshot.status == "done"
    messages = list(worker.store.load(cid).messages)
    assert validate_history(messages) == []
    (cut,) = tool_result_texts(messages)  # the tool is not idempotent: not run again
    assert "worker stopped" in cut and "effect unknown" in cut
    answer = history_texts(messages)[-1]
    assert answer.startswith("finished in ") and answer != f"finished in {killed}"
