"""End to end in headless Chromium: type, watch the answer stream, press Stop.

Needs Debian's ``chromium`` and ``chromium-driver`` and the ``selenium`` package; skipped
with a reason when they are missing locally. CI installs them and must not skip this test.
"""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from agent_sync.messages import validate_history
from agent_sync.testing import ScriptedModel
from tests.fixtures.bounds import HANG_BOUND

from ._client import serve
from .conftest import CHROMEDRIVER, CHROMIUM

# each wait is bounded by HANG_BOUND; Chromium on two busy cores is slow at every step
pytestmark = [pytest.mark.usefixtures("no_sse_threads_left"), pytest.mark.timeout(180)]

TURN = {"text": "Streaming words " * 30, "chunk_size": 4, "chunk_delay": 0.02, "stall_after": 10}


def test_type_watch_stream_press_stop(browser: Any, flask_example: Any) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    app = flask_example.create_app(lambda: ScriptedModel([TURN, "Hello again."]))
    registry = app.extensions["agent_sync.registry"]
    wait = WebDriverWait(browser, HANG_BOUND, poll_frequency=0.05)

    def state(_: Any = None) -> str:
        return str(browser.find_element(By.ID, "status").get_attribute("data-state"))

    def answers() -> list[str]:
        return [e.text for e in browser.find_elements(By.CSS_SELECTOR, ".msg.assistant")]

    with serve(app) as server:
        browser.get(f"http://127.0.0.1:{server.server_port}/")
        assert state() == "idle"
        browser.find_element(By.ID, "prompt").send_keys("hello")
        browser.find_element(By.ID, "send").click()

        wait.until(lambda _: "Streaming words Streaming" in (answers() or [""])[-1])
        assert state() == "streaming"
        assert browser.find_element(By.ID, "send").get_attribute("disabled") is not None

        browser.find_element(By.ID, "stop").click()
        wait.until(lambda _: state() == "stopped")

        shown = answers()[-1]
        assert "stopped by user" in browser.find_element(By.ID, "status").text
        cid = browser.execute_script("return sessionStorage.getItem('cid')")
        agent = registry.peek(cid)
        assert agent is not None and not agent.is_running
        assert validate_history(agent.messages) == []
        assert agent.messages[-1]["content"] == [{"text": shown}, {"text": "Cancelled by user"}]

        # The conversation continues after a stop.
        browser.find_element(By.ID, "prompt").send_keys("again")
        browser.find_element(By.ID, "send").click()
        wait.until(lambda _: state() == "done")
        assert answers()[-1] == "Hello again."
        assert len(agent.messages) == 4


def test_browser_test_dependencies_are_present_on_ci() -> None:
    """On CI the browser test must run, not skip."""
    if not os.environ.get("CI"):
        pytest.skip("only enforced on CI")
    missing = [
        name
        for name, found in (("chromium", CHROMIUM), ("chromedriver", CHROMEDRIVER))
        if found is None
    ]
    if importlib.util.find_spec("selenium") is None:
        missing.append("selenium (pip)")
    assert missing == [], f"CI must install {missing} for the browser test"
