"""Rules on how the tests wait (the guide: never assume machine speed; every test ends).

- Every ``join()`` of a thread or process has a timeout: an unbounded one turns a defect into
  a hang that only pytest-timeout reports, with no hint of what was waited for.
- A test that times a cancel compares against a bound from ``tests/fixtures/bounds.py``
  (``HANG_BOUND``, ``cut_short_of(alternative)``), never a number of seconds of its own: a
  cancel takes milliseconds, and a bound of one or two seconds failed under load.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TIMING = ("monotonic", "perf_counter", "elapsed", "took", "returned", "started", "_at")


def _test_sources() -> Iterator[tuple[str, ast.Module]]:
    for folder in ("tests", "integ_tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield str(path.relative_to(ROOT)), ast.parse(path.read_text(), str(path))


def _unbounded_joins(tree: ast.Module) -> list[int]:
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and not node.args
        and not node.keywords
    ]


def _timed_against_a_literal(tree: ast.Module) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Assert) or not isinstance(node.test, ast.Compare):
            continue
        compare = node.test
        sides = [compare.left, *compare.comparators]
        if not all(isinstance(op, (ast.Lt, ast.LtE)) for op in compare.ops):
            continue
        timed = any(word in ast.unparse(sides[0]) for word in TIMING)
        literal = isinstance(sides[-1], ast.Constant) and isinstance(sides[-1].value, (int, float))
        if timed and literal:
            lines.append(node.lineno)
    return lines


def test_every_join_in_the_tests_has_a_timeout() -> None:
    found = [f"{name}:{line}" for name, tree in _test_sources() for line in _unbounded_joins(tree)]
    assert found == []


def test_no_test_times_a_cancel_against_seconds_of_its_own() -> None:
    found = [
        f"{name}:{line}"
        for name, tree in _test_sources()
        for line in _timed_against_a_literal(tree)
    ]
    assert found == []


def test_the_rules_see_what_they_forbid() -> None:
    tree = ast.parse("t.join()\nassert time.monotonic() - started < 2\nassert took < BOUND\n")
    assert _unbounded_joins(tree) == [1]
    assert _timed_against_a_literal(tree) == [2]
