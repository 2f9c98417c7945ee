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
differently, only later. A writer whose process never steps again before
waiting for it (a save that is really synchronous) is let go after
`HOLD_LIMIT`, and says so (`released_by`).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
from typing import Any, Callable, Optional

#: Seconds a held writer waits for training to go on before it starts anyway:
#: only a process that waits for its writer before stepping again reaches it,
#: and then nothing overlapped (`released_by` says "limit"): it costs that
#: run this long, never a verdict.
HOLD_LIMIT = 10.0


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
        #: What let the held writers go, once one of them started: "training"
        #: (an optimizer step after the hand-over), "stop" (the run stopped
        #: first), "limit" (`HOLD_LIMIT`); None while none started.
        self.released_by: Optional[str] = None
        self._why: Optional[str] = None
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

    def starting(self, step: int) -> None:
        """A writer of save `step` is about to start: held there, if its save is."""
        if step != self._held:
            return
        if not self._gate.wait(HOLD_LIMIT):
            self.release("limit")
        if self.released_by is None:
            self.released_by = self._why

    def wait(self, step: int) -> None:
        """Until every writer of save `step`, if any, finished."""
        found = self._steps.get(step)
        if found is not None:
            found.settled.wait()


#: This process's table.
WRITERS = Writers()
