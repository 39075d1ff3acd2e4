"""The deployment examples (examples/deployments/), served by real gunicorn workers.

Three deployments: the Flask app on SQLite, the Django site on SQLite, the Flask app on
Redis; each is gunicorn with three ``sync`` workers sharing one store. A sync worker serves
one request at a time: while one worker runs an answer, the cancel and the second message
are answered by *another* process, so what these tests show crosses processes by
construction, not by luck (the ``pid`` in every answer confirms it).

gunicorn serves the examples as they are, except that conversations named ``slow-*`` get an
agent whose model calls :func:`wait_for_stop` (see :func:`probe_agent`): a tool that tells
the test it has started (over a Unix socket, no polling) and then waits until the run is
cancelled. Everything is ordered by that report and by HTTP answers; nothing sleeps.
"""

from __future__ import annotations

import functools
import http.client
import importlib.util
import json
import os
import re
import socket
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_sync import Agent, ToolContext, tool
from agent_sync.messages import CANCELLED_TEXT, validate_history
from agent_sync.stores import MemoryRunStore, RunStore, SQLiteRunStore
from agent_sync.testing import ScriptedModel
from tests.fixtures.at_once import entered_at_once, params_in_module
from tests.fixtures.bounds import COOPERATIVE_GRACE
from tests.fixtures.doubles import history_texts, tool_result_texts
from tests.fixtures.gunicorn import gunicorn
from tests.fixtures.gunicorn_ready import IMPORTS

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "examples" / "deployments"
if str(DEPLOY) not in sys.path:
    sys.path.insert(0, str(DEPLOY))  # the examples import each other as top-level modules

PROBE_SOCKET = "AGENT_SYNC_TEST_PROBE_SOCKET"
TOLD = "told to stop"
EXAMPLE_FILES = [
    "conversations.py",
    "flask_app.py",
    "django_site/settings.py",
    "django_site/urls.py",
    "django_site/views.py",
    "django_site/wsgi.py",
]


# -- what gunicorn serves (imported by the workers: PYTHONPATH holds the checkout) --


@tool
def wait_for_stop(marker: str, context: ToolContext) -> str:
    """Tell the test this call has started, then wait until the run is cancelled.

    Args:
        marker: Names the call for the test (the conversation id).
    """
    with socket.socket(socket.AF_UNIX) as conn:
        conn.connect(os.environ[PROBE_SOCKET])
        conn.sendall(f"{marker} {os.getpid()}\n".encode())
    return TOLD if context.wait(60) else "never told"


def probe_agent(store: RunStore, conversation_id: str) -> Agent:
    """The example's agent; in ``slow-*`` conversations, one that waits in a tool."""
    import conversations

    if not conversation_id.startswith("slow-"):
        return conversations.new_agent(store, conversation_id)
    call = {"name": "wait_for_stop", "input": {"marker": conversation_id}}
    return Agent(
        ScriptedModel([{"tool_calls": [call]}, "finished"]),
        tools=[wait_for_stop],
        store=store,
        conversation_id=conversation_id,
        tool_grace_period=COOPERATIVE_GRACE,  # the tool's own result is asserted
    )


def probe_flask_app() -> Any:
    """The Flask example's factory, as gunicorn calls it, with :func:`probe_agent`."""
    import flask_app

    return flask_app.create_app(new_agent=probe_agent)


PROBE_DJANGO_SETTINGS = """\
from django_site.settings import *  # noqa: F403

AGENT_SYNC = {**AGENT_SYNC, "NEW_AGENT": "tests.deploy.test_deployments.probe_agent"}  # noqa: F405
"""


# -- the test's side --


class Probe:
    """The test's end of :func:`wait_for_stop`: a Unix socket each call reports to."""

    def __init__(self, path: Path) -> None:
        assert len(str(path)) < 100, "a Unix socket path must be short"
        self.path = str(path)
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(self.path)
        self._listener.listen(16)
        self._started: dict[str, int] = {}

    def started(self, marker: str, timeout: float = 20.0) -> int:
        """Block until the call named ``marker`` has started; return its process id."""
        deadline = time.monotonic() + timeout
        while marker not in self._started:
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the tool of {marker} never started"
            self._listener.settimeout(remaining)
            conn, _ = self._listener.accept()
            with conn:
                conn.settimeout(remaining)
                report = conn.makefile().readline().split()
            self._started[report[0]] = int(report[1])
        return self._started[marker]

    def close(self) -> None:
        self._listener.close()


@dataclass
class Deployment:
    name: str
    port: int
    probe: Probe

    def request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            conn.request(method, path, body=body, headers=headers)
            response = conn.getresponse()
            return response.status, json.loads(response.read())
        finally:
            conn.close()

    def post(self, cid: str, text: str) -> tuple[int, Any]:
        body = json.dumps({"text": text}).encode()
        return self.request("POST", f"/conversations/{cid}/messages", body)

    def conversation(self, cid: str) -> Any:
        status, body = self.request("GET", f"/conversations/{cid}")
        assert status == 200, body
        return body

    def cancel(self, cid: str) -> Any:
        status, body = self.request("POST", f"/conversations/{cid}/cancel")
        assert status == 200, body
        return body


def _redis_store_or_skip() -> None:
    pytest.importorskip("redis", reason="pip install -e '.[redis]'")


DEPLOYMENTS = ["flask-sqlite", "django-sqlite", "flask-redis"]


def installed(deployment: str) -> bool:
    """Whether what a ``<framework>-<store>`` deployment runs on is installed."""
    framework, kind = deployment.split("-")
    needed = [framework, "gunicorn"] + (["redis"] if kind == "redis" else [])
    return all(importlib.util.find_spec(name) for name in needed)


@contextmanager
def serving(
    servers: dict[str, Callable[[], AbstractContextManager[int]]], probes: dict[str, Probe]
) -> Iterator[dict[str, tuple[int, Probe]]]:
    """Every server booted at once and stopped at once (``entered_at_once``): each one's
    port and probe; the probes are closed after."""
    try:
        with entered_at_once(servers) as ports:
            yield {name: (port, probes[name]) for name, port in ports.items()}
    finally:
        for probe in probes.values():
            probe.close()


def skip_unless_installed(deployment: str) -> None:
    """Skip the test if what the deployment runs on is not installed (as :func:`installed`)."""
    framework, kind = deployment.split("-")
    pytest.importorskip("gunicorn", reason="pip install gunicorn")
    pytest.importorskip(framework, reason=f"pip install -e '.[{framework}]'")
    if kind == "redis":
        _redis_store_or_skip()


@pytest.fixture(scope="module")
def deployments(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Deployment]]:
    """Each deployment the module's selected tests use: gunicorn, three sync workers,
    serving one example on one store of its own; all booted at once and stopped at once
    (``entered_at_once``)."""
    probes: dict[str, Probe] = {}
    servers: dict[str, Callable[[], AbstractContextManager[int]]] = {}
    for name in filter(installed, params_in_module(request, "deployment", DEPLOYMENTS)):
        framework, kind = name.split("-")
        folder = tmp_path_factory.mktemp(kind)
        env = {
            **os.environ,
            # the checkout (agent_sync, and tests.deploy for the probe) and the test settings
            "PYTHONPATH": os.pathsep.join(
                filter(None, [str(ROOT), str(folder), os.environ.get("PYTHONPATH")])
            ),
            PROBE_SOCKET: str(folder / "probe.sock"),
            "DJANGO_SECRET_KEY": uuid.uuid4().hex,
            "AGENT_SYNC_STORE": f"sqlite:///{folder / 'agent_sync.db'}",  # sqlite:////tmp/...
        }
        if kind == "redis":
            server = request.getfixturevalue("redis_server")
            env["AGENT_SYNC_STORE"] = f"redis://127.0.0.1:{server.port}/0"
            env["AGENT_SYNC_KEY_PREFIX"] = f"deploy-{uuid.uuid4().hex[:8]}:"
        if framework == "flask":
            app = "tests.deploy.test_deployments:probe_flask_app()"
            imports = ["tests.deploy.test_deployments", "agent_sync.web.flask", "flask"]
        else:
            (folder / "probe_settings.py").write_text(PROBE_DJANGO_SETTINGS)
            env["DJANGO_SETTINGS_MODULE"] = "probe_settings"
            app = "django_site.wsgi:application"
            imports = ["tests.deploy.test_deployments", "agent_sync.web.django", "django.core.wsgi"]
        env[IMPORTS] = ",".join(imports)  # once, in the master: each worker still loads the app
        probes[name] = Probe(folder / "probe.sock")
        options = ("--workers", "3", "--chdir", str(DEPLOY))
        log = folder / "gunicorn.log"
        servers[name] = functools.partial(gunicorn, app, env=env, log=log, options=options)
    with serving(servers, probes) as served:
        yield {name: Deployment(name, port, probe) for name, (port, probe) in served.items()}


@pytest.fixture(scope="module", params=DEPLOYMENTS)
def deployment(request: pytest.FixtureRequest, deployments: dict[str, Deployment]) -> Deployment:
    """One of the :func:`deployments`."""
    skip_unless_installed(str(request.param))
    return deployments[str(request.param)]


def test_every_worker_sees_the_same_history(deployment: Deployment) -> None:
    cid = f"chat-{uuid.uuid4().hex[:8]}"
    posted_by: list[int] = []
    read_by: dict[int, Any] = {}
    with ThreadPoolExecutor(1, thread_name_prefix="test-deploy-post") as pool:
        for turn in range(30):  # until two workers have written turns, two read them (bounded)
            slow = None
            if turn % 2:  # hold a worker busy: this turn is answered by another one
                slow = f"slow-{uuid.uuid4().hex[:8]}"
                held = pool.submit(deployment.post, slow, "hold a worker")
                deployment.probe.started(slow)
            status, body = deployment.post(cid, f"message {turn}")
            assert status == 200, body
            assert body["stop_reason"] == "end_turn" and "offline model" in body["text"]
            posted_by.append(body["pid"])
            seen = deployment.conversation(cid)  # whichever worker: every turn so far
            assert history_texts(seen["messages"])[::2] == [f"message {n}" for n in range(turn + 1)]
            read_by[seen["pid"]] = seen["messages"]
            if slow is not None:
                assert deployment.cancel(slow)["cancelled"] is True
                assert held.result(timeout=20)[1]["stop_reason"] == "cancelled"
            if len(set(posted_by)) >= 2 and len(read_by) >= 2:
                break
    assert len(set(posted_by)) >= 2, "one worker answered every turn"
    assert len(read_by) >= 2, "one worker answered every read"
    final = deployment.conversation(cid)["messages"]
    assert [m["role"] for m in final] == ["user", "assistant"] * len(posted_by)
    assert all(final[: len(messages)] == messages for messages in read_by.values())
    assert validate_history(final) == []


def test_cancel_answered_by_another_worker_stops_the_run(deployment: Deployment) -> None:
    cid = f"slow-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(1, thread_name_prefix="test-deploy-post") as pool:
        answer = pool.submit(deployment.post, cid, "start the long job")
        runner = deployment.probe.started(cid)  # the tool is waiting, in worker `runner`
        assert deployment.conversation(cid)["run"]["status"] == "running"
        stopped = deployment.cancel(cid)
        assert stopped["cancelled"] is True and stopped["pid"] != runner
        status, body = answer.result(timeout=20)
    assert status == 200, body
    assert (body["stop_reason"], body["cancel_reason"]) == ("cancelled", "stopped by user")
    assert body["pid"] == runner

    after = deployment.conversation(cid)
    messages = after["messages"]
    assert after["run"] is None and validate_history(messages) == []
    assert tool_result_texts(messages) == [TOLD]  # the waiting tool was told, not abandoned
    assert messages[-1] == {"role": "assistant", "content": [{"text": CANCELLED_TEXT}]}
    assert deployment.cancel(cid)["cancelled"] is False  # nothing left to stop


def test_a_second_message_on_a_busy_conversation_gets_409(deployment: Deployment) -> None:
    cid = f"slow-{uuid.uuid4().hex[:8]}"
    with ThreadPoolExecutor(1, thread_name_prefix="test-deploy-post") as pool:
        answer = pool.submit(deployment.post, cid, "first")
        runner = deployment.probe.started(cid)
        before = deployment.conversation(cid)
        status, refused = deployment.post(cid, "second")
        assert status == 409 and refused["error"] == "busy" and refused["pid"] != runner
        during = deployment.conversation(cid)
        assert (during["messages"], during["run"]) == (before["messages"], before["run"])
        assert deployment.cancel(cid)["cancelled"] is True
        status, body = answer.result(timeout=20)
    assert status == 200 and body["stop_reason"] == "cancelled"
    messages = deployment.conversation(cid)["messages"]
    assert validate_history(messages) == []
    assert "first" in history_texts(messages) and "second" not in history_texts(messages)


def test_bad_requests_get_400_and_change_nothing(deployment: Deployment) -> None:
    cid = f"chat-{uuid.uuid4().hex[:8]}"
    for body in [b"{not json", b"[]", b'{"text": 3}', b'{"text": "  "}', b'{"words": "hi"}']:
        status, reply = deployment.request("POST", f"/conversations/{cid}/messages", body)
        assert (status, reply["error"]) == (400, "bad_request"), body
    status, reply = deployment.post("bad%20id", "hello")
    assert (status, reply["error"]) == (400, "bad_request")
    assert deployment.conversation(cid)["messages"] == []


# -- the Flask app in-process, and the docs page --


@pytest.fixture
def flask_app_module() -> Any:
    pytest.importorskip("flask", reason="pip install -e '.[flask]'")
    import flask_app

    return flask_app


@tool(requires_approval=True)
def wipe(path: str) -> str:
    """Wipe a path.

    Args:
        path: The path.
    """
    return f"wiped {path}"


def test_a_conversation_waiting_for_approval_gets_409_until_cancelled(
    flask_app_module: Any,
) -> None:
    store = MemoryRunStore()
    asks = {"tool_calls": [{"name": "wipe", "input": {"path": "/data"}}]}

    def new_agent(store: RunStore, cid: str) -> Agent:
        model = ScriptedModel([asks, "ok"] if cid == "c1" else ["unused"])
        return Agent(model, tools=[wipe], store=store, conversation_id=cid)

    client = flask_app_module.create_app(store, new_agent=new_agent).test_client()
    first = client.post("/conversations/c1/messages", json={"text": "wipe it"})
    assert first.status_code == 200 and first.json["stop_reason"] == "paused"
    assert client.get("/conversations/c1").json["run"]["status"] == "paused"
    second = client.post("/conversations/c2/messages", json={"text": "other"})
    assert second.status_code == 200  # other conversations are not affected
    refused = client.post("/conversations/c1/messages", json={"text": "anything"})
    assert (refused.status_code, refused.json["error"]) == (409, "paused")
    assert client.post("/conversations/c1/cancel").json["cancelled"] is True
    after = client.get("/conversations/c1").json
    assert after["run"] is None and validate_history(after["messages"]) == []
    assert after["messages"][-1]["content"][-1] == {"text": CANCELLED_TEXT}


def test_store_urls(tmp_path: Path) -> None:
    import conversations

    assert isinstance(conversations.store_from_url("memory:"), MemoryRunStore)
    path = tmp_path / "agent_sync.db"
    store = conversations.store_from_url(f"sqlite:///{path}")
    assert isinstance(store, SQLiteRunStore) and store.path == str(path)
    assert path.stat().st_mode & 0o777 == 0o600
    with pytest.raises(ValueError) as caught:
        conversations.store_from_url("postgres://app:hunter2@db/chat")
    assert "hunter2" not in str(caught.value)


def test_the_docs_show_the_examples_as_they_are() -> None:
    """docs/deployments.md shows each example file whole; a leading ``# requires:`` line
    (which keeps tests/test_docs.py from running a block that needs its neighbours) aside,
    each block is the file, which the tests above serve."""
    page = (ROOT / "docs" / "deployments.md").read_text()
    blocks = [
        re.sub(r"\A# requires:[^\n]*\n", "", block)
        for block in re.findall(r"```python\n(.*?)```", page, re.S)
    ]
    for name in EXAMPLE_FILES:
        assert (DEPLOY / name).read_text() in blocks, f"docs/deployments.md lacks {name} as is"
