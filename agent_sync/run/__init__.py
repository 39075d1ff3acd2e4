"""The run as data: the :class:`Run` handle, :class:`RunState`, :class:`RunSnapshot`,
:class:`Step`.

Inside (see ``docs/architecture.md``): ``_settings`` (a run's settings), ``_slot`` (the
agent's history and its run), ``_driver`` (a run's lifecycle and loop), ``_handle`` (the
handles users hold), ``_context`` (a run's live state), ``_model_step`` and ``_steps``
(functions of that state that name the next step), ``_output`` (reading a structured
answer), ``_commits``/``_durable``/``_log_cache`` (a run and its store), ``_assemble``
(stream events into a message), ``_inbox`` (injected input), ``_hooks`` (hooks and the
tracer), ``_approvals`` (checking decisions), ``_subruns`` (sub-agents' paused runs). The
run's data (``RunState``...) lives in ``agent_sync._run_state``, below the run and the
stores.
"""

from .._run_state import FORMAT, RunPhase, RunSnapshot, RunState, RunStatus, Step, StepName
from ._driver import CancelMode
from ._handle import Run

__all__ = [
    "FORMAT",
    "CancelMode",
    "Run",
    "RunPhase",
    "RunSnapshot",
    "RunState",
    "RunStatus",
    "Step",
    "StepName",
]
