"""Hand-built runs for the oracle: records, trace events and launcher outcomes, no process.

    run(rank(0).loaded(4).final(), rank(1).collective("barrier", 3).hung(), timed_out=True)

States are `state(step, rank)` (what the job holds after `step`); saves happen at SAVE_STEPS.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Optional

from ckpt_harness.inject.trace import Event
from ckpt_harness.launch import Cut, GroupOutcome, RankOutcome, RankStatus
from ckpt_harness.oracle import Reference
from ckpt_harness.records.runs import RankRun, Run
from ckpt_harness.state import Record, capture

#: The steps the synthetic job saves at; a resume after breaking save K may fall back to PREV.
SAVE_STEPS = (2, 4, 6)
K, PREV, OLDER = 6, 4, 2

STACK = """Thread 0x00007f (most recent call first):
  File "/site/torch/distributed/c10d.py", line 12 in barrier
  File "/job/train.py", line 40 in save
  File "/site/ckpt_harness/launch/rank.py", line 88 in main
"""


def state(step: int, rank: int, /, **changes: Any) -> Record:
    """The state the job has on `rank` right after step `step` (a key set to None is dropped)."""
    values = {"w": step / 8, "step": step, "rank": rank, **changes}
    return capture({k: v for k, v in values.items() if v is not None})


def final(rank: int, /, **changes: Any) -> Record:
    return state(8, rank, **changes)


def saved(ranks: int = 2) -> dict[int, dict[int, Record]]:
    return {s: {r: state(s, r) for r in range(ranks)} for s in SAVE_STEPS}


def reference(ranks: int = 2, k: int = K, prev: Optional[int] = PREV) -> Reference:
    return Reference(saved(ranks), k, prev, {r: final(r) for r in range(ranks)})


class RankBuilder:
    def __init__(self, r: int) -> None:
        self.r = r
        self.status = RankStatus.OK
        self.signal: Optional[int] = None
        self.stack: Optional[str] = None
        self.stopped = False
        self.finished_at: Optional[float] = None
        self.records: list[dict] = []
        self.events: list[Event] = []
        self.clock = 0.0

    def _record(self, event: str, **fields: Any) -> "RankBuilder":
        self.records.append({"event": event, **fields})
        return self

    def loaded(self, step: Optional[int], record: Optional[Record] = None) -> "RankBuilder":
        return self._record("loaded", step=step, state=record if record is not None else state(step or 0, self.r))

    def loaded_full(self, step: int, record: Record) -> "RankBuilder":
        return self._record("loaded full", step=step, state=record)

    def saved(self, step: int, record: Optional[Record] = None) -> "RankBuilder":
        return self._record("saved", step=step, state=record if record is not None else state(step, self.r))

    def saved_full(self, step: int, record: Record) -> "RankBuilder":
        return self._record("saved full", step=step, state=record)

    def final(self, record: Optional[Record] = None) -> "RankBuilder":
        return self._record("final", state=record if record is not None else final(self.r))

    def event(self, kind: str, phase: str, **fields: Any) -> "RankBuilder":
        self.clock += 1.0
        self.events.append(Event.parse({"kind": kind, "rank": self.r, "phase": phase, "t": self.clock, **fields}))
        return self

    def fault(self, fault: str = "crash", phase: str = f"save {K}", index: int = 3) -> "RankBuilder":
        return self.event("fault", phase, fault=fault, index=index)

    def collective(self, op: str, n: int, at: str = "enter", phase: str = f"save {K}") -> "RankBuilder":
        return self.event("collective", phase, point=0, op=op, n=n, at=at, caller="train.py:40 in save()")

    def failed(self, phase: str = "load", message: str = "boom", type: str = "builtins.RuntimeError",
               traceback: str = "", at: Optional[float] = None) -> "RankBuilder":
        """`at`: seconds from the launch when it raised."""
        self.status, self.finished_at = RankStatus.FAILED, at
        traceback = traceback or f"Traceback (most recent call last):\n  ...\n{type}: {message}\n"
        return self._record("error", type=type, message=message, phase=phase, traceback=traceback)

    def crashed(self, signal: int = 9) -> "RankBuilder":
        self.status, self.signal = RankStatus.CRASHED, signal
        return self

    def hung(self, stack: Optional[str] = STACK, stopped: bool = False) -> "RankBuilder":
        self.status, self.stack, self.stopped = RankStatus.HUNG, stack, stopped
        return self

    def build(self) -> RankRun:
        outcome = RankOutcome(self.r, pid=0, log=Path(f"/nonexistent/rank{self.r}.log"), status=self.status,
                              signal=self.signal, stack=self.stack, stopped=self.stopped,
                              finished_at=self.finished_at)
        return RankRun(outcome, list(self.records), list(self.events))


def rank(r: int) -> RankBuilder:
    return RankBuilder(r)


def run(*ranks: RankBuilder, timed_out: bool = False, stuck: bool = False, name: str = "resume") -> Run:
    built = [b.build() for b in ranks]
    cut = Cut.FAILURE if stuck else Cut.DEADLINE if timed_out else None
    outcome = GroupOutcome([r.outcome for r in built], timed_out=timed_out, elapsed=0.1,
                           stuck_after_failure=stuck, cut=cut)
    return Run(name, Path("/nonexistent"), outcome, built)


def both(make: Callable[[RankBuilder], RankBuilder], ranks: int = 2, **kwargs: Any) -> Run:
    """A run whose ranks are all built by `make(rank(r))`."""
    return run(*(make(rank(r)) for r in range(ranks)), **kwargs)


def resumed(step: Optional[int] = K, ranks: int = 2, /, **changes: Any) -> Run:
    """Every rank loads `step` as saved (None: a fresh start) and finishes with the final state."""
    return run(*(rank(r).loaded(step).final(final(r, **changes)) for r in range(ranks)))


def faulted(fault: str = "crash", ranks: int = 2, fired: bool = True, **kwargs: Any) -> Run:
    """The run a fault was armed in; rank 0 is where it fired."""
    builders = [rank(r).saved(OLDER).saved(PREV) for r in range(ranks)]
    if fired:
        builders[0].fault(fault)
    return run(*builders, name="faulted", **kwargs)
