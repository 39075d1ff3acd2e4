"""Keeping a run's history valid, as the run's modules use it: defined in
:mod:`agent_sync._history` (below the run and the stores, which both use it)."""

from .._history import add_user_blocks, answer_round, close_turn, tool_result_message

__all__ = ["add_user_blocks", "answer_round", "close_turn", "tool_result_message"]
