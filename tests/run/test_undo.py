"""The driver's undo stack: each action once, last pushed first, the rest run when one
raises, and an action a Ctrl-C interrupted run once more (it may not have run at all)."""

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


def test_an_action_a_ctrl_c_cut_short_is_run_once_more() -> None:
    """As when the signal lands on the action's entry: popped, none of it ran. The slot's
    release must still happen, or the agent stays held for good."""
    released: list[bool] = []
    landed = [False]

    def release_slot() -> None:
        if not landed[0]:
            landed[0] = True
            raise KeyboardInterrupt  # before the body ran
        released.append(True)

    undo = Undo()
    undo.push(release_slot)
    undo.push(lambda: None)
    with pytest.raises(KeyboardInterrupt):
        undo.close()
    assert released == [True]


def test_an_action_that_keeps_raising_ctrl_c_is_tried_twice_not_forever() -> None:
    calls: list[int] = []

    def stubborn() -> None:
        calls.append(1)
        raise KeyboardInterrupt

    undo = Undo()
    undo.push(stubborn)
    with pytest.raises(KeyboardInterrupt):
        undo.close()
    assert len(calls) == 2
    undo.close()  # popped for good
    assert len(calls) == 2
