"""The Celery example (examples/celery_chat/) as its README runs it: a real ``celery
worker`` and real gunicorn workers on one redis-server, the web answering with the streams
of runs the Celery worker owns; and docs/deployments.md shows its files as they are."""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from agent_sync.messages import validate_history
from tests.celery.conftest import start_worker, stop_worker
from tests.fixtures.gunicorn import gunicorn
from tests.fixtures.gunicorn_ready import IMPORTS
from tests.web._client import SSEConnection, frames_until, request_json

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "celery_chat"
FILES = ["tasks.py", "web.py"]


@pytest.fixture(scope="module")
def site(redis_server: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    """The example's Celery worker and two gunicorn workers; yields gunicorn's port."""
    pytest.importorskip("gunicorn", reason="pip install gunicorn")
    pytest.importorskip("flask", reason="pip install -e '.[flask]'")
    folder = tmp_path_factory.mktemp("celery-example")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        "REDIS_URL": redis_server.url,
        "CELERY_BROKER_URL": f"redis://127.0.0.1:{redis_server.port}/3",  # its own queue
        "AGENT_SYNC_KEY_PREFIX": f"example-{uuid.uuid4().hex[:8]}:",
    }
    lines: list[str] = []
    options = ("--worker-class", "gthread", "--workers", "2", "--threads", "4")
    log = folder / "gunicorn.log"
    # gunicorn's master imports the package and the framework once (not the example's
    # modules: they make its Celery app and store), each worker loads the app after the fork
    web_env = {**env, IMPORTS: "flask,agent_sync.web.flask,agent_sync.celery"}
    # the Celery worker boots while gunicorn does, and stops while gunicorn does: a boot is
    # mostly imports, a warm shutdown mostly Celery's sleeps
    with ThreadPoolExecutor(1, thread_name_prefix="test-celery-example") as executor:
        starting = executor.submit(
            start_worker, ["-A", "tasks", "worker", "--concurrency=1"], env, lines, EXAMPLE
        )
        stopping = None
        try:
            with gunicorn(
                "web:create_app()", env=web_env, log=log, options=options, cwd=EXAMPLE
            ) as port:
                starting.result()  # bounded: start_worker waits at most 60 s
                try:
                    yield port
                finally:
                    stopping = executor.submit(stop_worker, starting.result())
        finally:
            if stopping is not None:
                stopping.result()
            elif starting.exception() is None:  # gunicorn did not boot
                stop_worker(starting.result())
    assert "Traceback" not in "".join(lines), "".join(lines)


def test_the_web_streams_a_run_that_a_celery_worker_owns(site: int) -> None:
    cid = f"c-{uuid.uuid4().hex[:8]}"
    conn = SSEConnection(site, "/api/chat", {"conversation_id": cid, "message": "Hello"})
    try:
        assert conn.status == 200
        frames = frames_until(conn, "done")
    finally:
        conn.close()
    run_id = frames[0].data["run_id"]
    assert re.fullmatch(r"Answered by a Celery worker \(pid \d+\)\.", frames[-1].data["text"])
    status, history = request_json(site, "GET", f"/api/history?conversation_id={cid}")
    assert status == 200 and len(history["messages"]) == 2
    assert validate_history(history["messages"]) == []
    status, stopped = request_json(site, "POST", f"/api/runs/{run_id}/stop", {})
    assert (status, stopped) == (200, {"cancelled": False})  # over: nothing to stop
    status, replay = request_json(
        site, "GET", f"/api/runs/{run_id}/events", headers={"Last-Event-ID": f"{run_id}:1"}
    )
    assert status == 200 and "event: done" in replay  # any web worker replays it


def test_the_docs_show_the_example_as_it_is() -> None:
    page = (ROOT / "docs" / "deployments.md").read_text()
    blocks = [
        re.sub(r"\A# requires:[^\n]*\n", "", block)
        for block in re.findall(r"```python\n(.*?)```", page, re.S)
    ]
    for name in FILES:
        assert (EXAMPLE / name).read_text() in blocks, f"docs/deployments.md lacks {name} as is"
