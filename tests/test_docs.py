"""Every Python example in README.md and docs/**/*.md runs.

Blocks whose first line is ``# requires: ...`` (credentials, a web framework's project
setup) are shown, not run.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCK = re.compile(r"```python\n(.*?)```", re.S)


def examples() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        name = page.relative_to(ROOT).as_posix()
        for number, code in enumerate(BLOCK.findall(page.read_text()), start=1):
            if not code.lstrip().startswith("# requires:"):
                found.append((f"{name}#{number}", code))
    return found


@pytest.mark.parametrize(("where", "code"), examples(), ids=[w for w, _ in examples()])
def test_example_runs(where: str, code: str, capsys: pytest.CaptureFixture[str]) -> None:
    exec(compile(code, where, "exec"), {"__name__": "__doc_example__"})
