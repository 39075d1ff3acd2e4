"""Fixtures of the guardrail tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.guardrails._wires import WIRES, Wire


@pytest.fixture(params=sorted(WIRES))
def wire(request: pytest.FixtureRequest) -> Iterator[Wire]:
    """Each wire's server and model (:mod:`tests.guardrails._wires`)."""
    yield from WIRES[request.param]()
