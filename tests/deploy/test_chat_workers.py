"""The chat routes under real ``gunicorn --workers 3`` on SQLite and on Redis.

Sync workers: a worker streaming an answer serves nothing else until the stream ends, so a
stop, a decision or an inject sent meanwhile is answered by *another* process by
construction (every answer carries its worker's pid in ``X-Worker-Pid`` to show it).
Reconnects land on whichever worker is free. Nothing sleeps: the test waits on frames,
HTTP answers and the probe socket of tests/deploy/test_deployments.py.
"""

from __future__ import annotations

import functools
import http.client
import json
import os
import random
import signal
import sys
import uuid
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, tool
from agent_sync.messages import validate_history
from agent_sync.stores import RunStore
from agent_sync.testing import ScriptedModel
from tests.deploy.test_deployments import (
    DEPLOYMENTS,
    PROBE_SOCKET,
    TOLD,
    Probe,
    installed,
    serving,
    skip_unless_installed,
    wait_for_stop,
)
from tests.fixtures.at_once import params_in_module
from tests.fixtures.bounds import COOPERATIVE_GRACE
from tests.fixtures.gunicorn import gunicorn
from tests.fixtures.gunicorn_ready import IMPORTS
from tests.web._client import Frame, SSEConnection, frames_until

ROOT = Path(__file__).resolve().parents[2]
STORE_URL = "AGENT_SYNC_TEST_STORE"
LONG_TEXT = "".join(f"word{n} " for n in range(150))
_SINCE_THE_END = 1 << 62


# -- what gunicorn serves --


@tool(requires_approval=True)
def delete_file(path: str) -> str:
    """Delete a file.

    Args:
        path: The file.
    """
    return f"deleted {path} in {os.getpid()}"


def make_agent(store: RunStore, cid: str) -> Agent:
    """``slow-*``: a tool that waits until cancelled; ``approve-*``: a gated call, then an
    answer (a resumed run's agent gets only the answer); ``long-*``: a long streamed text;
    ``crash-*``: a run that resumes after its worker dies, whose tool waits (the agent
    taking it over gets only the answer)."""
    if cid.startswith("crash-"):
        current = store.load(cid, since=_SINCE_THE_END).run
        taking_over = current is not None and current.state.status == "running"
        call = {"name": "wait_for_stop", "input": {"marker": cid}}
        return Agent(
            ScriptedModel(
                ["answered after the crash"] if taking_over else [{"tool_calls": [call]}]
            ),
            tools=[wait_for_stop],
            store=store,
            conversation_id=cid,
            lease_s=1.0,
            on_owner_lost="resume",
        )
    if cid.startswith("slow-"):
        turns: list[Any] = [{"tool_calls": [{"name": "wait_for_stop", "input": {"marker": cid}}]}]
    elif cid.startswith("approve-"):
        current = store.load(cid, since=_SINCE_THE_END).run
        resumed = current is not None and current.state.status == "paused"
        ask = {"text": "deleting", "tool_calls": [{"name": "delete_file", "input": {"path": "/x"}}]}
        turns = ["deleted it"] if resumed else [ask, "deleted it"]
    elif cid.startswith("long-"):
        turns = [{"text": LONG_TEXT, "chunk_size": 7, "chunk_delay": 0.002}]
    else:
        turns = ["hello"]
    return Agent(
        ScriptedModel(turns + ["finished"]),
        tools=[wait_for_stop, delete_file],
        store=store,
        conversation_id=cid,
        tool_grace_period=COOPERATIVE_GRACE,  # the tool's own result is asserted
    )


def create_app() -> Any:
    """The app gunicorn serves: the blueprint on the store named by the environment."""
    import flask

    from agent_sync.web.flask import chat_blueprint

    sys.path.insert(0, str(ROOT / "examples" / "deployments"))
    import conversations

    store = conversations.store_from_url(
        os.environ[STORE_URL], prefix=os.environ.get("AGENT_SYNC_KEY_PREFIX", "agent_sync:")
    )
    app = flask.Flask(__name__)
    blueprint = chat_blueprint(lambda cid: make_agent(store, cid), store=store, keepalive=1.0)
    app.register_blueprint(blueprint, url_prefix="/api")

    @app.after_request
    def tell_pid(response: flask.Response) -> flask.Response:
        response.headers["X-Worker-Pid"] = str(os.getpid())
        return response

    return app


# -- the test's side --


@dataclass
class Workers:
    port: int
    probe: Probe

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, Any, int]:
        """``(status, JSON body, worker pid)``."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            payload = None if body is None else json.dumps(body)
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, f"/api{path}", body=payload, headers=headers)
            response = conn.getresponse()
            data = response.read()
            parsed = json.loads(data) if data else None
            return response.status, parsed, int(response.getheader("X-Worker-Pid", "0"))
        finally:
            conn.close()

    def chat(self, cid: str, message: str = "go") -> SSEConnection:
        conn = SSEConnection(
            self.port, "/api/chat", {"conversation_id": cid, "message": message}, timeout=30
        )
        assert conn.status == 200, conn.read_body()
        return conn

    def events(self, run_id: str, last: str | None = None) -> SSEConnection:
        headers = {} if last is None else {"Last-Event-ID": last}
        return SSEConnection(
            self.port, f"/api/runs/{run_id}/events", None, headers=headers, method="GET", timeout=30
        )


@pytest.fixture(scope="module")
def deployments(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Workers]]:
    """Each deployment the module's selected tests use: gunicorn, three sync workers,
    serving the routes (Flask's :func:`create_app` or Django's :mod:`tests.deploy.chat_django`)
    on one store of its own; all booted at once and stopped at once (``entered_at_once``)."""
    probes: dict[str, Probe] = {}
    servers: dict[str, Callable[[], AbstractContextManager[int]]] = {}
    for deployment in filter(installed, params_in_module(request, "workers", DEPLOYMENTS)):
        framework, kind = deployment.split("-")
        folder = tmp_path_factory.mktemp(kind)
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
            PROBE_SOCKET: str(folder / "probe.sock"),
            STORE_URL: f"sqlite:///{folder / 'agent_sync.db'}",
        }
        app = "tests.deploy.test_chat_workers:create_app()"
        imports = ["tests.deploy.test_chat_workers", "agent_sync.web.flask", "flask"]
        if framework == "django":
            env["DJANGO_SETTINGS_MODULE"] = "tests.deploy.chat_django"
            app = "django.core.wsgi:get_wsgi_application()"
            imports = [
                "tests.deploy.test_chat_workers",
                "agent_sync.web.django",
                "django.core.wsgi",
            ]
        env[IMPORTS] = ",".join(imports)  # once, in the master: each worker still loads the app
        if kind == "redis":
            server = request.getfixturevalue("redis_server")
            env[STORE_URL] = f"redis://127.0.0.1:{server.port}/0"
            env["AGENT_SYNC_KEY_PREFIX"] = f"chat-{uuid.uuid4().hex[:8]}:"
        probes[deployment] = Probe(folder / "probe.sock")
        log = folder / "gunicorn.log"
        servers[deployment] = functools.partial(gunicorn, app, env=env, log=log, cwd=ROOT)
    with serving(servers, probes) as served:
        yield {name: Workers(port, probe) for name, (port, probe) in served.items()}


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def workers(request: pytest.FixtureRequest, deployments: dict[str, Workers]) -> Workers:
    """One of the :func:`deployments`."""
    skip_unless_installed(str(request.param))
    return deployments[str(request.param)]


def _seq(frame: Frame) -> int:
    assert frame.id is not None
    return int(frame.id.rsplit(":", 1)[1])


def test_stop_posted_to_another_worker_ends_the_stream(workers: Workers) -> None:
    cid = f"slow-{uuid.uuid4().hex[:8]}"
    conn = workers.chat(cid)
    run_id = frames_until(conn, "run")[0].data["run_id"]
    runner = workers.probe.started(cid)
    status, body, pid = workers.request("POST", f"/runs/{run_id}/stop", {"reason": "stop!"})
    assert (status, body) == (200, {"cancelled": True}) and pid != runner
    done = frames_until(conn, "done")[-1]
    assert (done.data["stop_reason"], done.data["cancel_reason"]) == ("cancelled", "stop!")
    conn.drop()
    status, history, _ = workers.request("GET", f"/history?conversation_id={cid}")
    results = [
        part["text"]
        for message in history["messages"]
        for block in message["content"]
        if "toolResult" in block
        for part in block["toolResult"]["content"]
    ]
    assert results == [TOLD] and validate_history(history["messages"]) == []


def test_a_decision_posted_to_another_worker_continues_the_same_stream(workers: Workers) -> None:
    cid = f"approve-{uuid.uuid4().hex[:8]}"
    conn = workers.chat(cid)
    frames = frames_until(conn, "approval_required")
    request = frames[-1].data
    decision = {"decisions": {request["approval_id"]: True}}
    status, body, _ = workers.request("POST", f"/runs/{request['run_id']}/decisions", decision)
    assert (status, body["status"]) == (202, "running")
    rest = frames_until(conn, "done")
    assert [_seq(f) for f in frames + rest] == list(range(1, len(frames) + len(rest) + 1))
    assert rest[-1].data["text"] == "deleted it"
    again = workers.request("POST", f"/runs/{request['run_id']}/decisions", decision)
    assert again[0] == 409
    conn.drop()
    status, history, _ = workers.request("GET", f"/history?conversation_id={cid}")
    assert sum("deleted /x" in json.dumps(m) for m in history["messages"]) == 1  # ran once


def test_inject_and_cancel_by_conversation_from_another_worker(workers: Workers) -> None:
    cid = f"slow-{uuid.uuid4().hex[:8]}"
    conn = workers.chat(cid)
    run_id = frames_until(conn, "run")[0].data["run_id"]
    runner = workers.probe.started(cid)
    status, body, pid = workers.request("POST", f"/runs/{run_id}/inject", {"content": "hurry"})
    assert (status, body["queued"]) == (202, True) and pid != runner
    busy = SSEConnection(
        workers.port, "/api/chat", {"conversation_id": cid, "message": "again"}, timeout=30
    )
    assert busy.status == 409 and busy.json()["error"] == "busy"
    busy.drop()
    status, body, pid = workers.request("POST", "/cancel", {"conversation_id": cid})
    assert body == {"cancelled": True} and pid != runner
    frames = frames_until(conn, "done")
    assert [f.data for f in frames if f.event == "input_injected"] == [
        {"content": [{"text": "hurry"}]}
    ]
    conn.drop()


def test_reconnects_at_random_moments_lose_and_duplicate_nothing(workers: Workers) -> None:
    chooser = random.Random(os.environ.get("PYTEST_XDIST_WORKER", "") + "seed")
    reconnects = 0
    while reconnects < 100:
        cid = f"long-{uuid.uuid4().hex[:8]}"
        conn = workers.chat(cid)
        got: list[Frame] = []
        while True:
            frames = conn.frames()
            stop_after = chooser.randint(1, 12)
            ended = False
            for frame in frames:
                if frame.event == "comment":
                    continue
                got.append(frame)
                if frame.event == "done":
                    ended = True
                    break
                if len(got) % stop_after == 0:
                    break
            conn.drop()
            if ended:
                break
            reconnects += 1
            conn = workers.events(got[0].data["run_id"], last=got[-1].id)
            if conn.status == 204:
                break
            assert conn.status == 200
        conn.drop()
        run_id = got[0].data["run_id"]
        assert [_seq(f) for f in got] == list(range(1, len(got) + 1))  # no hole, no duplicate
        whole = workers.events(run_id)
        replay = frames_until(whole, "done")
        whole.drop()
        assert [f.raw for f in replay] == [f.raw for f in got]  # byte for byte
        assert "".join(f.data["text"] for f in got if f.event == "text") == LONG_TEXT


def test_every_worker_refuses_bad_requests_and_sees_the_same_history(workers: Workers) -> None:
    cid = f"chat-{uuid.uuid4().hex[:8]}"
    conn = workers.chat(cid, "hello")
    run_id = frames_until(conn, "done")[0].data["run_id"]
    conn.drop()
    for method, path, body in [
        ("POST", "/chat", {"conversation_id": 5, "message": "x"}),
        ("POST", "/chat", {"id": cid, "messages": []}),
        ("POST", "/cancel", {"conversation_id": ["x"]}),
        ("POST", f"/runs/{run_id}/decisions", {"decisions": [True]}),
        ("POST", f"/runs/{run_id}/inject", {"content": 3}),
        ("POST", f"/runs/{run_id}/stop", {"reason": 3}),
    ]:
        status, answer, _ = workers.request(method, path, body)
        assert (status, answer["error"]) == (400, "bad_request"), path
    assert workers.request("POST", "/runs/run_unknown/stop", {})[0] == 404
    seen: dict[int, Any] = {}
    holder = f"slow-{uuid.uuid4().hex[:8]}"
    held = workers.chat(holder)  # one worker busy: the next reads come from the others
    frames_until(held, "run")
    busy = workers.probe.started(holder)
    for _ in range(6):
        status, history, pid = workers.request("GET", f"/history?conversation_id={cid}")
        assert status == 200 and pid != busy
        seen[pid] = history["messages"]
    workers.request("POST", "/cancel", {"conversation_id": holder})
    frames_until(held, "done")
    held.drop()
    status, history, pid = workers.request("GET", f"/history?conversation_id={cid}")
    seen[pid] = history["messages"]
    assert all(messages == history["messages"] for messages in seen.values())
    assert [m["role"] for m in history["messages"]] == ["user", "assistant"]


def test_a_killed_workers_run_goes_on_in_another_and_its_stream_with_it(
    workers: Workers,
) -> None:
    """SIGKILL the worker running a resumable run: the browser reconnects to any other
    worker (which starts recovering as it follows the run), the run is taken over after
    its lease, and the one stream reads the rest: no hole, the cut call ended, one done."""
    cid = f"crash-{uuid.uuid4().hex[:8]}"
    conn = workers.chat(cid)
    seen = frames_until(conn, "tool_start")
    run_id, call_id = seen[0].data["run_id"], seen[-1].data["id"]
    os.kill(workers.probe.started(cid), signal.SIGKILL)
    conn.drop()
    rest = workers.events(run_id, last=seen[-1].id)
    assert rest.status == 200
    seen += frames_until(rest, "done")
    rest.drop()
    assert [_seq(f) for f in seen] == list(range(1, len(seen) + 1))
    events = [f.event for f in seen]
    assert events.count("run") == events.count("resumed") == events.count("done") == 1
    ends = [f.data for f in seen if f.event == "tool_end"]
    assert [(e["id"], e["status"]) for e in ends] == [(call_id, "error")]
    assert seen[-1].data["text"] == "answered after the crash"
    status, history, _ = workers.request("GET", f"/history?conversation_id={cid}")
    assert status == 200 and validate_history(history["messages"]) == []
    assert "effect unknown" in json.dumps(history["messages"])
