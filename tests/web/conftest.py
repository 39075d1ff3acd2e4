"""Fixtures for the web tests: the example apps served by real threaded WSGI servers."""

from __future__ import annotations

import shutil
import sys
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ._run_threads import assert_no_runs_left

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class CloseRecorder:
    """WSGI middleware: sets ``closed`` once the server has closed a response body.

    Tests wait on it instead of sleeping: when the server has called ``close()`` on the
    SSE body, the agent has been cancelled and joined.
    """

    def __init__(self, app: WSGIApp) -> None:
        self.app = app
        self.closed = threading.Event()
        self.count = 0
        self._changed = threading.Condition()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        return _Recorded(self.app(environ, start_response), self)

    def wait_for_closes(self, count: int, timeout: float = 5.0) -> bool:
        """Wait until the server has closed ``count`` response bodies in all."""
        with self._changed:
            return self._changed.wait_for(lambda: self.count >= count, timeout)

    def _on_close(self) -> None:
        with self._changed:
            self.count += 1
            self._changed.notify_all()
        self.closed.set()


@dataclass
class _Recorded:
    body: Iterable[bytes]
    recorder: CloseRecorder

    def __iter__(self) -> Iterator[bytes]:
        return iter(self.body)

    def close(self) -> None:
        try:
            close = getattr(self.body, "close", None)
            if close is not None:
                close()
        finally:
            self.recorder._on_close()


@pytest.fixture(scope="session")
def flask_example() -> Any:
    """The Flask example's module (examples/flask_chat/chat_app.py)."""
    sys.path.insert(0, str(EXAMPLES / "flask_chat"))
    import chat_app

    return chat_app


@pytest.fixture
def no_runs_left() -> Iterator[None]:
    """Fail if a published run's threads outlive the test (see ``assert_no_runs_left``)."""
    yield
    assert_no_runs_left()


@pytest.fixture
def no_sse_threads_left() -> Iterator[None]:
    """Fail if an SSE worker thread outlives the test."""
    yield
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("agent-sync-sse")]
    assert leaked == []


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")


@pytest.fixture(scope="session")
def browser() -> Iterator[Any]:
    """Headless Chromium through Debian's chromedriver (skipped when missing locally)."""
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(
            "chromium/chromedriver not installed (apt-get install chromium chromium-driver)"
        )
    webdriver = pytest.importorskip("selenium.webdriver", reason="pip install selenium")
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="agent-sync-chromium-")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-dev-shm-usage",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ):
        options.add_argument(arg)
    # Selenium must not look for (or download) a driver: use Debian's.
    driver = webdriver.Chrome(options=options, service=Service(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
