"""The writers of each save: work the code under test handed over while it saved.

A save may return before its checkpoint is written. `dcp.async_save` hands
the writing to a pool and returns a future; Lightning's `AsyncCheckpointIO`
submits it to a pool and returns nothing; a trainer may start a thread of
its own, or a checkpoint process. Whatever the writer, the hand-over is
seen: work given to a thread pool or a new thread in the phase of a save
(`probes.follow_threads`, which also gives it the phase "bg_save 4"), or a
future a save entry point returned (`saves.Saves.in_flight`: DCP's
checkpoint process does its work in no thread of this one). This module
keeps, per save step, the writers handed over and not finished yet, and
whether one of them raised: a save has *landed* once its last writer
finished and none raised.

A thread pool's own worker threads are not writers: they outlive every
save. The tasks they run are. Nor is a daemon thread started during a
save: the interpreter does not wait for it at exit, so it is no write a
process means to finish (tqdm's monitor thread, started by the progress
bar of the Trainer's evaluation inside its save, runs until the process
ends; counted, that save would never land). One table per process, since
the threads that hand work over and those that do it are the process's.

A run may *hold* the writers of one save (`hold`, `Stop.SLOW_WRITER`):
each waits, as it starts, until the process made an optimizer step after
the save handed it over. Training then overlaps the save in flight, as it
does on storage slower than a training step, and a writer that reads the
live state instead of a copy taken as the save was called writes another
step's (a torn snapshot). The hold is all it changes: nothing is written
differently, only later. A process that cannot train on
without a held writer is not made to wait for it: once every thread that
handed the save's writers over waits on a future or joins a thread
(torchtitan waits for its CPU staging before the next optimizer step; a
pool is shut down at exit), the held writer handed over first is let go
("waited"), then the next one, as long as everything let go so far waits
too. What the staging copied is then what it would be on slow storage,
and the writers handed over after it (the upload of the staged copy) are
still held until training goes on. A writer nothing lets go starts after
`HOLD_LIMIT`. Each says what let it go (`released_by`).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import itertools
import sys
import threading
import time
from typing import Any, Callable, Optional

#: Seconds a held writer waits for training to go on before it starts anyway:
#: only a process that waits for its writer before stepping again reaches it,
#: and then nothing overlapped (`released_by` says "limit"): it costs that
#: run this long, never a verdict.
HOLD_LIMIT = 10.0

#: Seconds between two looks, by the held writer next in line, at whether the process waits for it.
POLL = 0.02
#: Seconds after a writer let go one by one finished before the next may go: the thread that waited
#: for it is still waking from its wait meanwhile, and would be taken for waiting for the next.
SETTLE = 0.25


@functools.lru_cache(maxsize=None)
def _waits() -> frozenset:
    """The code of the calls that wait for a writer: a future's result, a
    wait on futures, a thread's join, the interpreter's wait at exit for
    the threads it must finish."""
    import concurrent.futures as futures
    return frozenset(f.__code__ for f in (futures.Future.result, futures.wait, futures.as_completed,
                                          threading.Thread.join, getattr(threading, "_shutdown", futures.wait)))


def _waiting(ident: int, waits: frozenset) -> bool:
    """Is thread `ident` in one of the calls `waits` (or gone)? Read from its
    frames' code alone: nothing of the thread is touched."""
    frame = _current_frames().get(ident)
    while frame is not None:
        if frame.f_code in waits:
            return True
        frame = frame.f_back
    return ident not in {t.ident for t in threading.enumerate()}


def _current_frames() -> dict:
    """`sys._current_frames()` with the cyclic collector off while it runs.
    On CPython before 3.12 it allocates while it holds the lock of the
    interpreter's thread list, and a collection started by that allocation
    takes the same lock: the thread deadlocks holding the GIL, and with it
    the whole process (python/cpython#106883; seen here as a unit test of
    this module frozen for good). Off for the microseconds of the call: an
    automatic collection of this process's other threads waits that long."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return sys._current_frames()
    finally:
        if enabled:
            gc.enable()


@dataclasses.dataclass
class _Step:
    """The writers of one save step."""

    running: int = 0
    #: One of them raised (sticky: a save with a writer that failed never landed).
    failed: bool = False
    settled: threading.Event = dataclasses.field(default_factory=threading.Event)


class Writers:
    """This process's writers, by the step of the save that handed them over."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._steps: dict[int, _Step] = {}
        #: The save whose writers are held (`hold`), and what lets them go.
        self._held: Optional[int] = None
        self._gate = threading.Event()
        self._hook: Any = None
        self._why: Optional[str] = None
        #: What let each held writer go, as it started: "training" (an
        #: optimizer step after the hand-over), "waited" (the process waited
        #: for it), "stop" (the run stopped first), "limit" (`HOLD_LIMIT`).
        self._let_go: list[str] = []
        #: Tickets in hand-over order; those of the held save's writers not let
        #: go yet, started or not (the first of them is next in line, whichever
        #: thread reaches its start first); the threads that handed them over;
        #: the writers let go one by one ("waited") still at work.
        self._tickets = itertools.count()
        self._queued: set[int] = set()
        self._handers: set[int] = set()
        self._solo: set[int] = set()
        #: When a writer let go one by one last finished: its waiter wakes from
        #: its wait then, and is not taken for waiting still within `SETTLE`.
        self._solo_done = 0.0
        #: Called, from the writer's own thread, when the last running writer
        #: of a step finished: (step, whether any of its writers raised).
        self.on_settled: Callable[[int, bool], None] = lambda step, failed: None

    def handed(self, step: int) -> int:
        """A writer of save `step` was handed its work (it has not started yet,
        or just did); its ticket, the order of the hand-over, for `starting`."""
        with self._lock:
            ticket = next(self._tickets)
            if step == self._held:
                self._queued.add(ticket)
                self._handers.add(threading.get_ident())
            found = self._steps.setdefault(step, _Step())
            if found.running == 0 and found.settled.is_set():  # another round of writers for the same save
                found.settled = threading.Event()
            found.running += 1
        return ticket

    def finished(self, step: int, failed: bool) -> None:
        """A writer of save `step` returned (`failed`: it raised, or its future did)."""
        with self._lock:
            found = self._steps[step]
            found.running -= 1
            found.failed = found.failed or failed
            settled = found.running == 0
            if threading.get_ident() in self._solo:
                self._solo.discard(threading.get_ident())
                self._solo_done = time.monotonic()
        if settled:
            try:  # recorded before anyone waiting on the step goes on (and stops the rank, say)
                self.on_settled(step, found.failed)
            finally:
                found.settled.set()

    def had(self, step: int) -> bool:
        """Was any writer handed work for save `step`?"""
        return step in self._steps

    def running(self, step: int) -> bool:
        """Is a writer of save `step` still at work?"""
        found = self._steps.get(step)
        return found is not None and found.running > 0

    def failed(self, step: int) -> bool:
        found = self._steps.get(step)
        return found is not None and found.failed

    # -- holding a save's writers (`Stop.SLOW_WRITER`) -------------------------------------------
    def hold(self, step: int) -> None:
        """Hold the writers of save `step` until the process made an optimizer
        step after the save handed them over (or `release`, or `HOLD_LIMIT`).
        The optimizer hook goes in once torch is imported (`arm`): a script
        may set its environment before it imports torch."""
        self._held = step
        if "torch.optim.optimizer" in sys.modules:
            self.arm()

    def arm(self) -> None:
        """Watch optimizer steps for the held save, if any (`saves` calls it as torch is imported)."""
        step = self._held
        if step is None or self._hook is not None or self._gate.is_set():
            return
        import torch.optim.optimizer as optimizer

        def stepped(_optimizer: Any, _args: Any, _kwargs: Any) -> None:
            if self.had(step):  # steps before the save are not training past it
                self.release("training")
        self._hook = optimizer.register_optimizer_step_post_hook(stepped)

    def release(self, why: str) -> None:
        """Let the held writers go (at once, and any handed over later)."""
        if self._gate.is_set():
            return
        self._why = why
        self._gate.set()
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    @property
    def released_by(self) -> Optional[str]:
        """What let the held writers go: "training" if it let any of them go
        (training overlapped the save), else what let the first one go; None
        while none started."""
        return "training" if "training" in self._let_go else next(iter(self._let_go), None)

    def starting(self, step: int, ticket: int) -> None:
        """A writer of save `step` is about to start: held there, if its save is."""
        if step != self._held:
            return
        deadline = time.monotonic() + HOLD_LIMIT
        why = None
        while why is None and not self._gate.wait(POLL):
            if time.monotonic() > deadline:
                self.release("limit")
            elif self._waited_for(ticket) and not self._gate.is_set():
                # The gate read after the threads: a thread descheduled between its wait for the gate
                # and its look at them sees the process wait for it only after training went on, and
                # the stop that came after it (a loaded machine: seen as "waited" for a job that trained).
                why = "waited"
        with self._lock:
            self._queued.discard(ticket)
            if why is not None:
                self._solo.add(threading.get_ident())
            self._let_go.append(why or self._why or "limit")

    def _waited_for(self, ticket: int) -> bool:
        """Is `ticket` the first held writer in line (in hand-over order, not
        in the order their threads happen to start: the upload DCP hands over
        after its staging waits for it), and does every thread that handed
        the save over, and every writer let go before it, wait?"""
        with self._lock:
            first = min(self._queued, default=None)
            threads = self._handers | self._solo
        if first != ticket:
            return False
        if time.monotonic() - self._solo_done < SETTLE:
            return False
        waits = _waits()
        return all(_waiting(ident, waits) for ident in threads)

    def wait(self, step: int) -> None:
        """Until every writer of save `step`, if any, finished."""
        found = self._steps.get(step)
        if found is not None:
            found.settled.wait()


#: This process's table.
WRITERS = Writers()
