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
save. The tasks they run are. One table per process, since the threads
that hand work over and those that do it are the process's.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Callable, Optional


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
        #: Called, from the writer's own thread, when the last running writer
        #: of a step finished: (step, whether any of its writers raised).
        self.on_settled: Callable[[int, bool], None] = lambda step, failed: None

    def handed(self, step: int) -> None:
        """A writer of save `step` was handed its work (it has not started yet, or just did)."""
        with self._lock:
            found = self._steps.setdefault(step, _Step())
            if found.running == 0 and found.settled.is_set():  # another round of writers for the same save
                found.settled = threading.Event()
            found.running += 1

    def finished(self, step: int, failed: bool) -> None:
        """A writer of save `step` returned (`failed`: it raised, or its future did)."""
        with self._lock:
            found = self._steps[step]
            found.running -= 1
            found.failed = found.failed or failed
            settled = found.running == 0
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

    def wait(self, step: int, timeout: Optional[float] = None) -> bool:
        """Until every writer of save `step` finished; True if they did (or there were none)."""
        found = self._steps.get(step)
        return found is None or found.settled.wait(timeout)


#: This process's table.
WRITERS = Writers()
