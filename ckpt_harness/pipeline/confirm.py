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

A confirmation costs at most the failing case again. A failure ends the
cold run where it ended the warm one; a hang the watch proved ends it as
soon as it forms again (`launch.beacon`, `launch.looks`); and a hang that
only the deadline ended is not waited out twice: the cold runs go under
`<root>/cold`, each in its warm run's place (`layout.warm_twin`), and one
ends as soon as its ranks are where that run hung, by their collectives in
the same order (`looks.reached`).
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Optional, Sequence

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


def confirm_cases(results: Sequence[CaseResult],
                  cold: Callable[[Optional[list[str]]], Sequence[CaseResult]]) -> list[CaseResult]:
    """As `confirm`, running again with cold starts only the cases doubted
    (`cold(names)`: those cases, on a golden run of their own), and every case
    (`cold(None)`) when a judgment of the golden run itself is doubted: every
    case stands on it. The others keep their results, in their places."""
    names = list(dict.fromkeys(r.case for r in results if r.warm and not r.verdict.ok))
    if not names:
        return list(results)
    if any(name.startswith("golden") or name == "flake" for name in names):
        return confirm(results, lambda: cold(None))
    mine = [r for r in results if r.case in names]
    redone = confirm(mine, lambda: [r for r in cold(names) if r.case in names])
    out: list[CaseResult] = []
    for r in results:
        if r.case not in names:
            out.append(r)
        elif r is mine[0]:  # where the first of them was
            out += redone
    return out
