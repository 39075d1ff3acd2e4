"""The runnable examples of docs/providers/anthropic.md run (those needing a key are skipped)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parents[2] / "docs" / "providers" / "anthropic.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)


@pytest.mark.parametrize(
    "code", EXAMPLES, ids=[f"anthropic.md#{i}" for i in range(1, len(EXAMPLES) + 1)]
)
def test_example_runs(code: str) -> None:
    if code.lstrip().startswith("# requires:"):
        pytest.skip(code.lstrip().splitlines()[0])
    exec(compile(code, str(PAGE), "exec"), {"__name__": "__doc_example__"})
