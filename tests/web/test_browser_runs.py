"""The chat-runs demo (examples/chat_runs) in headless Chromium, served by
``gunicorn --workers 3`` on one SQLite file: a reload mid-answer picks the answer up where
it was (no piece lost or shown twice), Approve and Deny buttons answer a gated call, and
the tool runs once. Any request may land on any worker.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agent_sync.messages import validate_history
from agent_sync.stores import SQLiteRunStore
from tests.fixtures.bounds import HANG_BOUND
from tests.fixtures.gunicorn import gunicorn

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "examples" / "chat_runs"

# Each step is bounded by HANG_BOUND; a test takes several, and Chromium beside gunicorn on
# two busy cores is slow at each: the test as a whole gets their sum.
pytestmark = pytest.mark.timeout(180)


@dataclass(frozen=True)
class Demo:
    base: str  # the URL gunicorn serves
    db: Path  # the SQLite file its workers share
    log: Path  # gunicorn's log (its warnings: a worker timed out, restarted)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo under gunicorn (3 gthread workers, one SQLite file)."""
    pytest.importorskip("gunicorn", reason="pip install gunicorn")
    pytest.importorskip("flask", reason="pip install -e '.[flask]'")
    folder = tmp_path_factory.mktemp("chat_runs")
    env = {key: value for key, value in os.environ.items() if key != "AGENT_SYNC_PROVIDER"}
    env.update(
        PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])),
        AGENT_SYNC_DB=str(folder / "chat_runs.db"),
    )
    with gunicorn(
        "app:create_app()",
        env=env,
        log=folder / "gunicorn.log",
        options=("--worker-class", "gthread", "--workers", "3", "--threads", "8"),
        cwd=APP,
    ) as port:
        yield Demo(f"http://127.0.0.1:{port}", folder / "chat_runs.db", folder / "gunicorn.log")


class Page:
    def __init__(self, browser: Any, demo: Demo) -> None:
        from selenium.webdriver.common.by import By
        from selenium.webdriver.support.ui import WebDriverWait

        self.browser, self.base, self.demo, self.by = browser, demo.base, demo, By
        self.wait = WebDriverWait(browser, HANG_BOUND, poll_frequency=0.05)
        browser.get(f"{demo.base}/")
        browser.execute_script("sessionStorage.clear()")  # a new conversation
        browser.refresh()
        self.wait.until(lambda _: self.state() == "idle")

    def state(self) -> str:
        return str(self.browser.find_element(self.by.ID, "status").get_attribute("data-state"))

    def wait_for_state(self, state: str) -> None:
        """Wait until the page's status is ``state``, for as long as the page keeps showing
        new frames: HANG_BOUND bounds a silence, not the answer's length (on busy cores the
        demo's answer streams several times slower than its 40 ms a chunk). A page silent
        for HANG_BOUND fails, saying where the page and the run were."""
        from selenium.common.exceptions import TimeoutException

        shown = self.last_frame()
        while True:
            try:
                self.wait.until(lambda _: self.state() == state)
                return
            except TimeoutException:
                now = self.last_frame()
                if now is None or now == shown:
                    raise AssertionError(f"never {state!r}: {self.where()}") from None
                shown = now

    def last_frame(self) -> str | None:
        """The id of the last frame the page showed of the answer in flight."""
        last = self.browser.execute_script("return sessionStorage.getItem('last')")
        return str(last) if last else None

    def where(self) -> str:
        status = self.browser.find_element(self.by.ID, "status").text
        run = self.browser.execute_script("return sessionStorage.getItem('run')")
        where = f"the page shows {status!r}, its run {run!r}, its last frame {self.last_frame()!r}"
        if run:
            store = SQLiteRunStore(self.demo.db)
            snapshot = store.get(run)
            events = store.read_events(run)
            tail = [(event.seq, event.data.get("type")) for event in events[-3:]]
            where += f"; the run is {snapshot and snapshot.status}, its log ends {tail}"
            store.close()
        log = self.demo.log.read_text().strip().splitlines()[-5:]
        return where + f"; gunicorn's log ends {log}"

    def send(self, text: str) -> None:
        self.browser.find_element(self.by.ID, "prompt").send_keys(text)
        self.browser.find_element(self.by.ID, "send").click()

    def answer(self) -> str:
        shown = self.browser.find_elements(self.by.CSS_SELECTOR, ".turn .assistant")
        return "".join(element.text for element in shown)

    def history(self) -> list[Any]:
        cid = self.browser.execute_script("return sessionStorage.getItem('cid')")
        with urllib.request.urlopen(f"{self.base}/api/history?conversation_id={cid}") as reply:
            messages: list[Any] = json.loads(reply.read())["messages"]
        return messages


def _texts(message: Any) -> str:
    return "".join(block.get("text", "") for block in message["content"])


def test_a_reload_mid_answer_goes_on_where_it_was(browser: Any, demo: Demo) -> None:
    page = Page(browser, demo)
    page.send("hello there")
    page.wait.until(lambda _: len(page.answer()) > 40)  # mid-answer
    before = page.answer()
    browser.refresh()
    page.wait_for_state("done")
    history = page.history()
    assert validate_history(history) == [] and _texts(history[0]) == "hello there"
    final = _texts(history[-1])
    assert final.startswith(before) and len(final) > len(before)
    assert page.answer() == final  # every piece once: nothing lost, nothing doubled


@pytest.mark.parametrize(("button", "outcome"), [("Approve", "Done: "), ("Deny", "I did not")])
def test_approve_and_deny_buttons_answer_a_gated_call(
    browser: Any, demo: Demo, button: str, outcome: str
) -> None:
    page = Page(browser, demo)
    page.send("delete the old logs")
    page.wait_for_state("waiting")
    box = browser.find_element(page.by.CSS_SELECTOR, ".approval")
    assert "delete_file" in box.text and "old.log" in box.text
    box.find_element(page.by.XPATH, f".//button[text()='{button}']").click()
    page.wait_for_state("done")
    assert outcome in page.answer()
    results = [
        block["toolResult"]
        for m in page.history()
        for block in m["content"]
        if "toolResult" in block
    ]
    assert len(results) == 1  # answered once, run (or refused) once
    assert ("deleted" in json.dumps(results)) == (button == "Approve")
