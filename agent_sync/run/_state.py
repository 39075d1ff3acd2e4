"""The run's data as the run's modules use it: :class:`RunState`, :class:`RunSnapshot`,
:class:`Step` and their types, defined in :mod:`agent_sync._run_state` (below the run and
the stores, which both use them: the run imports the stores, never the reverse)."""

from .._run_state import FORMAT, RunPhase, RunSnapshot, RunState, RunStatus, Step, StepName

__all__ = ["FORMAT", "RunPhase", "RunSnapshot", "RunState", "RunStatus", "Step", "StepName"]
