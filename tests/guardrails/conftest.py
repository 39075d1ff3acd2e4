"""Fixtures of the guardrail tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agent_sync.stores import SQLiteRunStore
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
