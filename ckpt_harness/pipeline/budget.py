"""A case budget (`--max-cases N`): the N cases of an exploration that see the most of it.

An exploration of a real script is tens of cases (an HF Trainer save is 58,
12 minutes here); a CI job that has minutes for it takes N. Which N matters:
the first N in plan order are one rank's first operations. A failure has a
cause that shows at a kind of operation, in a phase of the save, on a rank,
under a kind of fault, so the budget spends its cases to see each of those
once before it sees any twice: greedily, each next case the one that adds
the most not yet covered, ties to the earlier in plan order (so the same
plan always gives the same N); once every one is covered, a new round. What
is left out is reported with the command that runs exactly it.
"""

from __future__ import annotations

import shlex
from typing import Hashable, Sequence

from ckpt_harness.pipeline.cases import Case


def aspects(case: Case) -> frozenset[Hashable]:
    """What a case covers: its fault kind, and each of its points' rank, phase and operation."""
    seen: set[Hashable] = {("kind", case.kind)}
    for p in case.points:
        seen |= {("rank", p.rank), ("phase", p.phase), ("op", p.op)}
    return frozenset(seen)


def within(cases: Sequence[Case], budget: int) -> tuple[list[Case], list[Case]]:
    """(the `budget` cases to run, in plan order; the rest, in plan order)."""
    if budget >= len(cases):
        return list(cases), []
    left = list(cases)
    chosen: list[Case] = []
    covered: set[Hashable] = set()
    while len(chosen) < budget:
        gains = [len(aspects(c) - covered) for c in left]
        best = max(range(len(left)), key=lambda i: (gains[i], -i))
        if not gains[best]:  # every aspect seen: another round
            covered.clear()
            continue
        covered |= aspects(left[best])
        chosen.append(left.pop(best))
    order = {id(c): i for i, c in enumerate(cases)}
    return sorted(chosen, key=lambda c: order[id(c)]), left


def left_out(budget: int, chosen: Sequence[Case], left: Sequence[Case], everything: str) -> str:
    """The report's warning: what the budget left out, and how to run it
    (`everything`: the command that runs every case, an exploration's or a scenario's)."""
    rest = everything + "".join(f" --case {shlex.quote(c.name)}" for c in left)
    ran = sorted({a for c in chosen for a in aspects(c)}, key=repr)
    kinds = {name: sum(1 for a in ran if a[0] == name) for name in ("rank", "phase", "op", "kind")}
    return (f"--max-cases {budget}: ran {len(chosen)} of {len(chosen) + len(left)} cases "
            f"({kinds['rank']} ranks, {kinds['phase']} phases, {kinds['op']} operations, {kinds['kind']} fault kinds "
            f"among them); left out {len(left)}: {', '.join(c.name for c in left[:5])}"
            f"{' ...' if len(left) > 5 else ''}. Run them: {rest}   Run every case: {everything}")
