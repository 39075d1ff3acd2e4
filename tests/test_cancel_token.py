"""CancelToken on its own (links to scopes), and the scope's run id.

Runs driven through ``Agent(..., cancel=token)`` are covered in ``tests/run/test_token.py``.
"""

from __future__ import annotations

import doctest
import threading

import pytest

import agent_sync.cancel
from agent_sync import CancelScope, CancelToken

WAIT = 30.0


class Recorder:
    """A scope plus a record of every abort it ran (a scope runs them once, on cancel)."""

    def __init__(self, run_id: str | None = None) -> None:
        self.scope = CancelScope(run_id)
        self.aborts: list[threading.Thread] = []
        self.scope.register_abort(lambda: self.aborts.append(threading.current_thread()))


def test_cancel_reaches_every_linked_scope_once_with_the_first_reason() -> None:
    token = CancelToken()
    recorders = [Recorder(f"run-{i}") for i in range(3)]
    for recorder in recorders:
        token._link(recorder.scope)
    assert not token.cancelled and token.reason is None and not token.event.is_set()
    assert token.cancel("request ended") is True
    assert token.cancel("second") is False
    assert token.cancelled and token.event.is_set() and token.reason == "request ended"
    for recorder in recorders:
        assert recorder.scope.reason == "request ended"
        assert recorder.aborts == [threading.current_thread()]  # once, in the cancelling thread


def test_the_first_reason_wins_even_when_it_is_none() -> None:
    token = CancelToken()
    recorder = Recorder()
    token._link(recorder.scope)
    assert token.cancel() is True
    assert token.cancel("late") is False
    assert token.reason is None and recorder.scope.reason is None and recorder.scope.cancelled


def test_unlinked_scopes_are_not_touched() -> None:
    token = CancelToken()
    kept, dropped = Recorder(), Recorder()
    token._link(kept.scope)
    unlink = token._link(dropped.scope)
    unlink()
    unlink()  # idempotent
    token.cancel("stop")
    assert kept.scope.cancelled and kept.aborts
    assert not dropped.scope.cancelled and dropped.aborts == []
    unlink()  # still harmless after the cancel


def test_a_cancelled_token_cancels_a_newly_linked_scope_at_once() -> None:
    token = CancelToken()
    token.cancel("job aborted")
    recorder = Recorder()
    unlink = token._link(recorder.scope)
    assert recorder.scope.cancelled and recorder.scope.reason == "job aborted"
    assert recorder.aborts == [threading.current_thread()]  # in the linking thread
    unlink()
    assert recorder.aborts == [threading.current_thread()]


def test_one_token_serves_runs_one_after_another() -> None:
    token = CancelToken()
    for i in range(1000):  # a long-lived token (a job) must not accumulate finished runs
        recorder = Recorder(f"run-{i}")
        unlink = token._link(recorder.scope)
        recorder.scope.close()  # the run ends: the driver closes, then unlinks
        unlink()
    assert repr(token) == "<CancelToken live links=0>"
    last = Recorder("last")
    token._link(last.scope)
    assert repr(token) == "<CancelToken live links=1>"
    token.cancel("done")
    assert last.scope.reason == "done"


def test_a_finished_run_still_linked_is_not_cancelled() -> None:
    token = CancelToken()
    recorder = Recorder()
    token._link(recorder.scope)
    recorder.scope.close()  # closed, not yet unlinked: the race the driver's order covers
    assert token.cancel("late") is True
    assert not recorder.scope.cancelled and recorder.aborts == []


@pytest.mark.timeout(60)
def test_scope_cancels_run_outside_the_tokens_lock() -> None:
    token = CancelToken()
    reentered: list[object] = []
    scope = CancelScope("reentrant")

    def abort() -> None:  # a non-reentrant lock held here would deadlock every call below
        reentered.append(token.cancel("again"))
        other = CancelScope("linked-during-cancel")
        token._link(other)
        reentered.append(other.reason)
        reentered.append(repr(token))

    scope.register_abort(abort)
    token._link(scope)
    assert token.cancel("first") is True
    assert reentered == [False, "first", "<CancelToken cancelled reason='first'>"]


@pytest.mark.timeout(60)
def test_concurrent_cancel_from_eight_threads_has_one_winner() -> None:
    for _ in range(50):
        token = CancelToken()
        recorders = [Recorder() for _ in range(4)]
        for recorder in recorders:
            token._link(recorder.scope)
        barrier = threading.Barrier(8, timeout=WAIT)
        outcomes: dict[str, bool] = {}

        def cancel(
            reason: str,
            barrier: threading.Barrier = barrier,
            token: CancelToken = token,
            outcomes: dict[str, bool] = outcomes,
        ) -> None:
            barrier.wait()
            outcomes[reason] = token.cancel(reason)

        threads = [
            threading.Thread(target=cancel, args=(f"reason-{i}",), name=f"test-cancel-{i}")
            for i in range(8)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT)
        winners = [reason for reason, won in outcomes.items() if won]
        assert len(outcomes) == 8 and len(winners) == 1
        assert token.reason == winners[0]
        for recorder in recorders:
            assert recorder.scope.reason == winners[0] and len(recorder.aborts) == 1


@pytest.mark.timeout(60)
def test_link_racing_cancel_cancels_each_scope_exactly_once() -> None:
    for _ in range(50):
        token = CancelToken()
        recorders = [Recorder() for _ in range(40)]
        barrier = threading.Barrier(2, timeout=WAIT)

        def link_all(
            barrier: threading.Barrier = barrier,
            token: CancelToken = token,
            recorders: list[Recorder] = recorders,
        ) -> None:
            barrier.wait()
            for recorder in recorders:
                token._link(recorder.scope)

        linker = threading.Thread(target=link_all, name="test-linker")
        linker.start()
        barrier.wait()
        token.cancel("race")
        linker.join(WAIT)
        for recorder in recorders:  # cancelled by the canceller or at link: never neither
            assert recorder.scope.reason == "race" and len(recorder.aborts) == 1


def test_reprs_show_state_not_internals() -> None:
    token = CancelToken()
    assert repr(token) == "<CancelToken live links=0>"
    token.cancel("client disconnected")
    assert repr(token) == "<CancelToken cancelled reason='client disconnected'>"


def test_a_scope_carries_its_run_id() -> None:
    scope = CancelScope("run-42")
    assert scope.run_id == "run-42"
    assert repr(scope) == "<CancelScope run_id='run-42' live reason=None>"
    scope.cancel("timeout")
    assert repr(scope) == "<CancelScope run_id='run-42' cancelled reason='timeout'>"
    assert CancelScope().run_id is None
    with pytest.raises(AttributeError):
        scope.other = 1  # type: ignore[attr-defined]  # slots: no stray attributes


@pytest.mark.timeout(60)
def test_the_docstring_example_runs() -> None:
    finder = doctest.DocTestFinder(recurse=False)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(CancelToken, "CancelToken", module=agent_sync.cancel, globs={})
    assert tests and tests[0].examples
    for test in tests:
        runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
