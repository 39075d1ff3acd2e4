"""Which ``PartialOutput`` events a web run stores as ``partial_output`` records.

Each partial is the whole answer so far, so storing every one would make a run's event log
grow with the square of its answer. A run's log keeps the first partial of each model call
and then a partial only once the model call has streamed a quarter more partials than at the
last one kept (at least one more): the kept partials' sizes grow geometrically, so the log
grows linearly with the answer, and a small answer still shows every step of its first few.
The answer itself is in the ``done`` record (its ``text``) and the history.
"""

from __future__ import annotations

from ..events import AgentEvent, MessageComplete, PartialOutput

__all__ = ["PartialThrottle"]


class PartialThrottle:
    """Decides, event by event, whether a ``PartialOutput`` is kept. One per run."""

    __slots__ = ("_kept", "_seen")

    def __init__(self) -> None:
        self._seen = 0  # partials of the current model call
        self._kept = 0  # ... the number of the last one kept

    def keep(self, event: AgentEvent) -> bool:
        """Whether ``event`` goes into the log (every event but some partials)."""
        if isinstance(event, MessageComplete):
            self._seen = self._kept = 0  # the next model call starts its own answer
            return True
        if not isinstance(event, PartialOutput):
            return True
        self._seen += 1
        if self._seen - self._kept >= max(1, self._kept // 4):
            self._kept = self._seen
            return True
        return False
