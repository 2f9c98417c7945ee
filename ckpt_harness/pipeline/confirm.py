"""Confirmed cold: a verdict a warm start could have made is a cold run's.

A process a rank spawns to save (DCP's checkpoint process) starts warm by
default, from a copy of the rank made as it started (`launch.warm`), and so
does a script's torchrun worker, from a template of its agent
(`launch.warm_workers`), not from a fresh interpreter: seconds less per
rank and run, but not exactly the start the code under test gets outside
the harness. So a case whose
runs started one warm and that did not pass is run again with cold starts
(`cold_start`), and reported as that run judged it: the harness never
reports a failure a warm start could have made. The cold result says it was
confirmed, and what the warm run said where that differs.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

from ckpt_harness.verdict import CaseResult


def doubted(results: Sequence[CaseResult]) -> bool:
    """Does a result of these need a cold run: one of its runs started warm, and it did not pass?"""
    return any(r.warm and not r.verdict.ok for r in results)


def confirmed(warm: CaseResult, cold: CaseResult) -> CaseResult:
    """`cold` (the case run again with cold starts), saying so."""
    same = (warm.verdict, warm.summary) == (cold.verdict, cold.summary)
    said = "the same" if same else f"{warm.verdict.value.upper()}: {warm.summary}"
    note = (f"confirmed with cold starts (every process the run started, a torchrun worker or a process a rank "
            f"spawned to save, started as a fresh interpreter, as outside the harness; --cold-start runs every case "
            f"so): the warm run said {said}")
    return dataclasses.replace(cold, confirmed_cold=True,
                               details=f"{note}\n\n{cold.details}" if cold.details else note)


def confirm(results: Sequence[CaseResult], cold: Callable[[], Sequence[CaseResult]]) -> list[CaseResult]:
    """`results`, or where one is doubted, what `cold()` (the same cases with
    cold starts) gives: every one of those, matched to its warm result by case
    and check where it can be."""
    if not doubted(results):
        return list(results)
    warm = {(r.case, r.check): r for r in results}
    return [confirmed(warm[(r.case, r.check)], r) if (r.case, r.check) in warm else
            dataclasses.replace(r, confirmed_cold=True) for r in cold()]
