"""A case's stopwatch: where a case's time went, for its `Breakdown`, and its runs' timeline attached."""

from __future__ import annotations

import dataclasses
import time
from typing import Callable, Iterable, Optional, Sequence

from ckpt_harness.records.timeline import Note, attach
from ckpt_harness.records.runs import Run, run_breakdown
from ckpt_harness.verdict import Breakdown, CaseResult


class CaseClock:
    """A case's stopwatch: started when the case starts, told of each of its
    runs (`run`) and of the moment the oracle takes over (`judging`); `done`
    is the case's `Breakdown`. What the case spent outside its runs'
    launchers before the judging is the harness's part. Cheap: two clock
    reads per case and the phase events its runs read back anyway."""

    def __init__(self, context: Sequence[Run] = ()) -> None:
        self.started = time.monotonic()
        self.runs = Breakdown()
        self.judged_from: Optional[float] = None
        #: The runs the case is about, in the order they ran: those it builds
        #: on (`context`: the golden run) and those it timed (`run`).
        self.seen: list[Run] = list(context)
        self._context = len(self.seen)

    def run(self, make: Callable[[], Run], broken: Optional[int] = None, resume: bool = False) -> Run:
        """`make()`, a run of this case, timed: the run with its faults (or the
        one it stops, overwrites, stalls), whose save `broken` is the one
        broken, or with `resume` the resume from what that run left."""
        run = make()
        self.seen.append(run)
        split = run_breakdown(run, broken)
        if split is not None:
            self.runs += dataclasses.replace(split, **{"resume_run" if resume else "fault_run": split.wall})
        return run

    def judging(self) -> None:
        """The case's runs are over: what follows is the oracle's."""
        self.judged_from = time.monotonic()

    def done(self) -> Breakdown:
        now = time.monotonic()
        judging = now - self.judged_from if self.judged_from is not None else 0.0
        wall = now - self.started
        return dataclasses.replace(self.runs, harness=wall - self.runs.wall - judging, judging=judging, wall=wall)

    @property
    def warm(self) -> bool:
        """Did a run of the case start a process warm (`Run.warm_started`)? Not one it builds on (the
        golden run): a case confirmed cold stands on a golden run of its own (`Baseline.cold`), and a
        golden run's own judgments are confirmed where they are made (`pipeline.verify`, `baseline.prepare`)."""
        return any(run.warm_started for run in self.seen[self._context:])

    def stamp(self, result: CaseResult, notes: Iterable[Note] = (), every: bool = False) -> CaseResult:
        """`result` with where its seconds went (`done`), whether a run of it
        started warm, and the timeline of the case's runs (`records.timeline.attach`)."""
        warm = self.warm
        result = dataclasses.replace(result, timings=self.done(), warm=warm,
                                     also=tuple(dataclasses.replace(a, warm=warm) for a in result.also))
        return attach(result, self.seen, notes, every)
