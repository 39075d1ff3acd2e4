"""The driver's undo stack: each action once, last pushed first, the rest run when one
raises, a Ctrl-C included (the release that closes it is protected from Ctrl-C:
tests/test_release_interrupts.py sweeps that)."""

from __future__ import annotations

import pytest

from agent_sync.run._undo import Undo


def test_actions_run_once_last_first_and_an_error_stops_none() -> None:
    ran: list[str] = []
    undo = Undo()
    undo.push(lambda: ran.append("slot"))
    undo.push(lambda: (_ for _ in ()).throw(ValueError("boom")))
    undo.push(lambda: ran.append("scope"))
    with pytest.raises(ValueError, match="boom"):
        undo.close()
    assert ran == ["scope", "slot"]
    undo.close()  # nothing left: nothing runs twice
    assert ran == ["scope", "slot"]


def test_an_action_raising_ctrl_c_runs_once_and_stops_none_of_the_others() -> None:
    # The stack no longer reruns an interrupted action (a rerun only narrowed the window
    # between pop and run): its caller is protected instead, so every action runs once.
    ran: list[str] = []

    def interrupted() -> None:
        ran.append("interrupted")
        raise KeyboardInterrupt

    undo = Undo()
    undo.push(lambda: ran.append("slot"))
    undo.push(interrupted)
    undo.push(lambda: ran.append("scope"))
    with pytest.raises(KeyboardInterrupt):
        undo.close()
    assert ran == ["scope", "interrupted", "slot"]
    undo.close()  # popped for good
    assert ran == ["scope", "interrupted", "slot"]
