"""Fixtures of the guardrail tests."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_sync.stores import SQLiteRunStore
from tests.fixtures.bounds import HANG_BOUND
from tests.guardrails._wires import WIRES, Wire


@pytest.fixture(params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    """Each wire's server and model (:mod:`tests.guardrails._wires`)."""
    yield from WIRES[request.param]()


@pytest.fixture
def store(tmp_path: Path) -> Iterator[SQLiteRunStore]:
    """A SQLite run store in ``tmp_path/runs.db``."""
    opened = SQLiteRunStore(str(tmp_path / "runs.db"))
    yield opened
    opened.close()


@pytest.fixture
def quiet_cap() -> None:
    """Tool and check threads other tests released may still be finishing: let them, so
    that the abandoned-thread count this test reads moves only with its own."""
    for thread in threading.enumerate():
        if thread.name.startswith(("agent_sync-tool-", "guardrail-")):
            thread.join(HANG_BOUND)
