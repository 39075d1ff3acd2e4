"""What a web test checks when it ends: no published run's threads left behind."""

from __future__ import annotations

import threading

from tests.fixtures.bounds import HANG_BOUND


def run_threads() -> list[threading.Thread]:
    """The threads that iterate a published run (``agent-sync-run-N``) and write its log."""
    return [t for t in threading.enumerate() if t.name.startswith("agent-sync-run")]


def assert_no_runs_left() -> None:
    """Fail if a published run's threads outlive the test.

    A run's ``done`` record reaches followers before its thread has joined its log writer
    and given its slot back, so a test that saw ``done`` can still find the thread alive
    for a moment: each is joined up to HANG_BOUND, and only one still alive after that is a
    leak (a run that never ended)."""
    for thread in run_threads():
        thread.join(HANG_BOUND)
    assert [t.name for t in run_threads()] == []
