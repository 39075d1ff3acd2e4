"""Deadlines: one process-wide scheduler thread serves every ``timeout=``.

Design
------
``threading.Timer`` starts a thread per call, so 1,000 concurrent runs with a timeout would
hold 1,000 sleeping threads. Instead one daemon thread named ``agent_sync-deadlines`` owns a
heap of entries ordered by due time on the monotonic clock (ties in scheduling order),
sleeps until the earliest is due, then runs its callback. It is started by the first
:func:`schedule` and lives as long as the process; idle, it waits without a timeout.

Signal safety: no caller holds a lock
-------------------------------------
A ``KeyboardInterrupt`` (any exception a signal handler raises) lands in the main thread
between two bytecodes of whatever Python code runs there, including inside
``threading.Condition.__enter__`` just after it acquired its lock: that lock then stays held
for ever, and whoever waits for it next (this thread, every later timed call) hangs. So the
code callers run here takes no lock that another thread takes; each step that other threads
see is one C-level operation, which a signal cannot split:

* :func:`schedule` appends the entry to a ``deque`` (the thread takes it from there) and, when
  the thread sleeps and the entry is due before its planned wake-up (or a backlog of 256
  built up), puts a token on the thread's ``queue.SimpleQueue``. Otherwise the thread is not
  woken: it looks at the deque before it sleeps again. The backlog is bounded by what
  callers schedule while the thread waits for the GIL (a switch interval, 5 ms).
* :meth:`Deadline.cancel` is a flag on the entry: each deadline has a *claim* list, and the
  first of the thread (about to fire it) and a cancel to append to it wins. The thread never
  runs a callback whose claim it lost. Entries stay in the heap (lazy deletion): cancelled
  ones at the top are dropped at once, cancelled ones still in the deque are never pushed,
  and the heap is rebuilt without them when it has grown past twice its smallest size since
  the last rebuild (plus 256): bounded under any schedule/cancel churn, at amortised O(1).
* A cancel that finds the callback running waits on its own ``SimpleQueue``, which the thread
  fills when the callback returns.
* The thread is started by a short-lived raw thread (``_thread.start_new_thread``, one C
  call): ``Thread.start()`` waits on an ``Event`` whose lock the new thread takes too, so it
  must not run in the caller's thread.

An interrupted :func:`schedule` therefore leaves its deadline either scheduled (it fires as
usual, possibly late if the interrupt skipped the wake-up; the caller never got its
:class:`Deadline`) or not scheduled at all; an interrupted cancel leaves it cancelled or not.
Never a lock held. ``tests/test_signal_safety.py`` raises ``KeyboardInterrupt`` at every
bytecode of these paths and checks the scheduler afterwards.

Costs, guarantees and known races
---------------------------------
* :func:`schedule` and :meth:`Deadline.cancel` are O(1) in the caller (the heap work, O(log
  n), happens in the thread); :func:`pending_count` is O(entries) (tests, metrics).
* Callbacks run one at a time in the scheduler thread, so a slow callback delays every
  deadline due after it. Ours is :meth:`~agent_sync.cancel.CancelScope.cancel`, which sets
  an event and runs the providers' abort callbacks (a socket shutdown): fast. An exception
  from a callback is logged (warning, with the traceback) and the thread carries on.
* A callback runs at most once, and never before its due time. It may run later by as much
  as the callbacks queued ahead of it take (and the OS's wake-up latency).
* When :meth:`Deadline.cancel` returns, the callback has either *finished* or will never
  start: cancel racing the firing waits for the callback to return. The exception is a
  cancel from the scheduler thread itself (from inside a callback, or a ``__del__`` that the
  garbage collector happens to run there): waiting would deadlock, so it returns at once.
  Hence: do not call ``cancel()`` while holding a lock that a callback may take.
* ``os.fork()``: the child has no scheduler thread. A fork hook gives the child empty queues
  and heap; its first :func:`schedule` starts its own thread. Deadlines inherited from the
  parent never fire in the child, and cancelling them there returns at once.
"""

from __future__ import annotations

import _thread
import heapq
import itertools
import logging
import math
import os
import threading
import time
from collections import deque
from collections.abc import Callable
from queue import Empty, SimpleQueue

__all__ = ["Deadline", "pending_count", "schedule", "scheduler_thread"]

logger = logging.getLogger(__name__)

THREAD_NAME = "agent_sync-deadlines"

# Rebuild the heap once it has grown past twice its smallest size since the last rebuild,
# plus this: small heaps never pay for a rebuild, and each rebuild is paid for by at least as
# many schedules as it keeps.
_COMPACT_MIN = 256
# Wake the thread anyway once this many entries wait for it (schedules that are not due
# first do not wake it): the backlog, and the memory it holds, stays bounded.
_BACKLOG = 256

# Claims: the first item of a deadline's claim list says who won it.
_FIRE = "fire"
_CANCEL = "cancel"
_STOP = object()  # a wake token that ends the thread (tests' private schedulers)

_Entry = tuple[float, int, "Deadline"]


class Deadline:
    """One scheduled callback, returned by :func:`schedule`. Thread-safe.

    Attributes:
        when: The due time, on the :func:`time.monotonic` clock.
    """

    __slots__ = ("_callback", "_claim", "_done", "_generation", "_scheduler", "when")

    def __init__(
        self, scheduler: _Scheduler, when: float, callback: Callable[[], None], generation: int
    ) -> None:
        self.when = when
        self._callback: Callable[[], None] | None = callback
        self._scheduler = scheduler
        self._generation = generation
        # [winner, *queues of cancels waiting for the running callback]; appends only.
        self._claim: list[object] = []
        self._done = False

    def cancel(self) -> None:
        """Make sure the callback will not run (again). Idempotent; any thread; cheap.

        If the callback is running in the scheduler thread at this moment, waits for it to
        return (unless called from the scheduler thread itself), so that afterwards the
        callback has either finished or will never start.
        """
        claim = self._claim
        if not claim:
            claim.append(_CANCEL)
        if claim[0] is _CANCEL:
            self._callback = None  # whatever it references can be freed at once
            return
        self._scheduler.wait_done(self)

    def remaining(self) -> float:
        """Seconds until the deadline is due (0.0 once it is), whether or not cancelled."""
        return max(0.0, self.when - time.monotonic())

    @property
    def cancelled(self) -> bool:
        """Whether :meth:`cancel` stopped the callback before it started."""
        claim = self._claim
        return bool(claim) and claim[0] is _CANCEL

    @property
    def fired(self) -> bool:
        """Whether the callback has run (it has returned or raised)."""
        return self._done

    def __repr__(self) -> str:
        claim = self._claim
        state = (
            "pending"
            if not claim
            else "cancelled"
            if claim[0] is _CANCEL
            else "fired"
            if self._done
            else "firing"
        )
        return f"<Deadline {state} remaining={self.remaining():.3f}s>"


class _Scheduler:
    """The heap, its thread and the queues that feed it. One per process (:data:`_SCHEDULER`).

    Everything a caller touches is a C-level operation (see the module docstring); the heap
    and ``_boot_lock`` belong to the scheduler thread and the boot threads.
    """

    def __init__(self) -> None:
        self._generation = 0
        self._reset()

    def _reset(self) -> None:
        self._generation += 1
        self._incoming: deque[_Entry] = deque()  # scheduled, not yet in the heap
        self._wake: SimpleQueue[object] = SimpleQueue()  # tokens: "look at _incoming"
        self._seq = itertools.count()
        # When the thread plans to wake; -inf while it is awake (it publishes it, and only it).
        self._next_due = -math.inf
        self._heap: list[_Entry] = []
        self._low = 0  # the heap's smallest size since the last rebuild
        self._thread: threading.Thread | None = None
        self._ident: int | None = None
        self._booting = False
        self._boot_lock = threading.Lock()  # boot threads only, never a caller

    def after_fork_in_child(self) -> None:
        """Forget the parent's entries, queues and thread (``os.register_at_fork``)."""
        self._reset()

    def schedule(self, delay_s: float, callback: Callable[[], None]) -> Deadline:
        when = time.monotonic() + max(0.0, delay_s)
        deadline = Deadline(self, when, callback, self._generation)
        incoming = self._incoming
        incoming.append((when, next(self._seq), deadline))  # scheduled from here on
        next_due = self._next_due  # -inf while the thread is awake: it looks anyway
        if when < next_due or (len(incoming) > _BACKLOG and next_due > -math.inf):
            self._wake.put(None)
        if self._thread is None and not self._booting:
            _thread.start_new_thread(self._boot, ())
            self._booting = True  # after: an interrupt before it only costs a spare boot
        return deadline

    def wait_done(self, deadline: Deadline) -> None:
        """Return once the thread has run ``deadline``'s callback (which it claimed)."""
        if (
            deadline._done
            or deadline._generation != self._generation  # inherited across fork
            or _thread.get_ident() == self._ident  # from a callback: waiting would deadlock
        ):
            return
        done: SimpleQueue[None] = SimpleQueue()
        deadline._claim.append(done)
        if not deadline._done:  # set before the thread reads the claim list for queues
            done.get()

    def pending_count(self) -> int:
        # The backlog before the heap: an entry on its way to the heap is in one of them.
        incoming = list(self._incoming)
        heap = self._heap[:]
        queued = {id(entry) for entry in incoming}
        pending = sum(1 for entry in incoming if not entry[2]._claim)
        return pending + sum(1 for entry in heap if id(entry) not in queued and not entry[2]._claim)

    def thread(self) -> threading.Thread | None:
        return self._thread

    def stop(self) -> None:
        """End the thread once it has nothing due (tests' private schedulers only)."""
        self._wake.put(_STOP)

    # -- the boot threads and the scheduler thread (no signal ever lands there) --

    def _boot(self) -> None:
        with self._boot_lock:
            if self._thread is not None:
                return
            thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
            self._thread = thread
            try:
                thread.start()
            except BaseException:
                self._thread = None
                self._booting = False  # the next schedule tries again
                logger.exception("the deadline scheduler thread could not start")

    def _run(self) -> None:
        self._ident = _thread.get_ident()
        incoming, wake, heap = self._incoming, self._wake, self._heap
        while True:
            while incoming:  # peek, push, pop: pending_count() sees the entry throughout
                entry = incoming[0]
                if not entry[2]._claim:
                    heapq.heappush(heap, entry)
                incoming.popleft()
            self._drop_dead()
            if heap and heap[0][0] <= time.monotonic():
                self._fire(heap)
                continue
            due = heap[0][0] if heap else math.inf
            self._next_due = due  # published before the check below: nothing is missed
            if incoming:
                continue
            try:
                if due == math.inf:
                    token = wake.get()
                else:
                    token = wake.get(timeout=max(0.0, due - time.monotonic()))
            except Empty:
                token = None
            self._next_due = -math.inf  # awake: schedule() need not wake us until we publish
            while token is not _STOP and not wake.empty():
                token = wake.get_nowait()  # one pass serves every token queued
            if token is _STOP:
                return

    def _fire(self, heap: list[_Entry]) -> None:
        deadline = heap[0][2]
        claim = deadline._claim
        claim.append(_FIRE)  # a cancel that appended first wins
        heapq.heappop(heap)
        if claim[0] is not _FIRE:
            return
        callback = deadline._callback
        deadline._callback = None
        try:
            if callback is not None:
                callback()
        except BaseException:  # a callback must never stop every later deadline
            # The name only: a repr could carry anything the callback's object holds.
            name = getattr(callback, "__qualname__", type(callback).__name__)
            logger.warning("callback=<%s> | deadline callback failed", name, exc_info=True)
        finally:
            del callback  # do not keep the last callback's referents alive while idle
            deadline._done = True
            for waiter in claim[1:]:  # a cancel that appends later sees _done
                if isinstance(waiter, SimpleQueue):
                    waiter.put(None)

    def _drop_dead(self) -> None:
        """Pop cancelled entries off the top; rebuild the heap when it has doubled."""
        heap = self._heap
        while heap and heap[0][2]._claim:
            heapq.heappop(heap)
        if len(heap) > 2 * self._low + _COMPACT_MIN:
            live = [entry for entry in heap if not entry[2]._claim]
            heapq.heapify(live)
            heap[:] = live  # in place: one C call, pending_count() reads it any time
            self._low = len(heap)
        elif len(heap) < self._low:
            self._low = len(heap)


_SCHEDULER = _Scheduler()

if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_SCHEDULER.after_fork_in_child)


def schedule(delay_s: float, callback: Callable[[], None]) -> Deadline:
    """Run ``callback()`` in the scheduler thread once ``delay_s`` seconds have passed.

    Args:
        delay_s: Seconds from now (monotonic clock); zero or negative means "as soon as
            possible".
        callback: Called with no arguments, in the scheduler thread. It should be quick (it
            delays every deadline due after it); exceptions are logged and ignored.

    Returns:
        A :class:`Deadline`; :meth:`Deadline.cancel` disarms it.

    Thread-safe and signal-safe (it takes no lock); starts the scheduler thread on first use
    (in each process).
    """
    return _SCHEDULER.schedule(delay_s, callback)


def scheduler_thread() -> threading.Thread | None:
    """The scheduler thread of this process, or ``None`` until it has been started."""
    return _SCHEDULER.thread()


def pending_count() -> int:
    """How many deadlines are scheduled and neither fired, firing nor cancelled."""
    return _SCHEDULER.pending_count()
