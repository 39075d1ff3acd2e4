"""The run store contract suite: every :class:`~agent_sync.stores.RunStore` passes it
(and every :class:`~agent_sync.stores.RunEventLog`: each store of the package is both).

Subclass :class:`RunStoreContract` in a pytest module and override :meth:`make_store`
(a fresh, empty store per call); a store that works across processes also overrides
:meth:`process_factory`::

    from agent_sync.stores import MemoryRunStore
    from agent_sync.testing.run_store_contract import RunStoreContract

    class TestMemoryStore(RunStoreContract):
        def make_store(self):
            return MemoryRunStore()

Every test builds its states with :func:`make_state`, so the suite needs nothing but the
store. A lease that ran out is made without waiting (a run begun with ``lease_s=0`` is past
its lease at the store's next look); one lease test lets a short lease (``LEASE_S``) pass as
time, for a renewed run and a run beside it, and the event-log test of ``keep_s`` waits for
a complete log kept that long: that is the behaviour under test, bounded by the test's
timeout. The ``process_factory`` store is also used in this process, as a second
store object on the same data (a reader must wake for its appends as for another process's).

The suite is one class per concern, combined in :class:`RunStoreContract`: runs
(``_runs``), conversations (``_conversations``), signals (``_signals``) and when they are
acknowledged (``_signal_acks``), event logs (``_event_log``), lost runs
(``_lost_runs``) and conversations' values (``_values``), on a shared base (``_base``: the
fixture, :func:`make_state`).
"""

from __future__ import annotations

from ._base import LEASE_S, make_state
from ._base import _wait_past as _wait_past  # the package's own tests wait past a lease
from ._conversations import TURNS, ConversationsContract, take_turns
from ._event_log import EventLogContract
from ._lost_runs import LostRunsContract
from ._runs import RunsContract
from ._signal_acks import SignalAcksContract
from ._signals import SignalsContract
from ._values import ValuesContract

__all__ = ["LEASE_S", "TURNS", "RunStoreContract", "make_state", "take_turns"]


class RunStoreContract(
    RunsContract,
    ConversationsContract,
    SignalsContract,
    SignalAcksContract,
    EventLogContract,
    LostRunsContract,
    ValuesContract,
):
    """Inherit it; override :meth:`make_store` (and :meth:`process_factory`)."""
