"""How much slower this machine is right now than a quiet one, for timing budgets.

A budget written on a quiet two-core box ("the hang is reported within its
deadline plus 4 s") fails on a loaded CI runner although nothing is wrong,
and a suite that fails one run in N is switched off. So a test that times
something first measures what a fault-free two-rank group costs here and now
(launch, one all-reduce, teardown, on the warm fork server) and stretches
its quiet-box seconds by how much slower that was than on the quiet box.
On a quiet machine the budgets are the quiet ones; under load they grow
with the load, measured, not guessed.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from pathlib import Path

from ckpt_harness.launch import GroupSpec, prestart, run_group
from ckpt_harness.launch.group import STARTUP_TIMEOUT

#: A fault-free warm two-rank group, launch to teardown, on an idle 2-core box.
QUIET_LAUNCH = 0.04


@dataclasses.dataclass(frozen=True)
class Pace:
    #: Seconds a fault-free warm launch takes now (median of a few).
    launch: float

    @property
    def slowdown(self) -> float:
        return max(1.0, self.launch / QUIET_LAUNCH)

    def __call__(self, quiet_seconds: float) -> float:
        """`quiet_seconds` as long as they are on this machine right now."""
        return quiet_seconds * self.slowdown


def measure(run_dir: Path, samples: int = 3) -> Pace:
    prestart(wait=True)  # the fork server's torch import is not a launch
    times = []
    for i in range(samples):
        start = time.monotonic()
        outcome = run_group(GroupSpec(world_size=2, entry="tests.entries:all_reduce", payload=None,
                                      run_dir=run_dir / f"pace{i}", deadline=STARTUP_TIMEOUT))
        assert outcome.ok, "a fault-free group failed while measuring the machine's pace"
        times.append(time.monotonic() - start)
    return Pace(statistics.median(times))
