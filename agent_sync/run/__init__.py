"""The run as data: the :class:`Run` handle, :class:`RunState`, :class:`RunSnapshot`,
:class:`Step`.

Inside (see ``docs/architecture.md``): ``_state`` (the data), ``_context`` (a run's live
state), ``_steps`` (model, tools, finish: functions of that state that name the next step),
``_driver`` (the handle that owns scope, deadline, token and release), ``_assemble``
(stream events into a message), ``_inbox`` (injected input), ``_hooks`` (calling hooks),
``_output`` (the step that reads a structured answer, and partial output).
"""

from ._driver import CancelMode
from ._handle import Run
from ._state import FORMAT, RunPhase, RunSnapshot, RunState, RunStatus, Step, StepName

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
