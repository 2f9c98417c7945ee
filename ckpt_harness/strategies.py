"""Hypothesis strategies for fault plans beyond the single faults `explore` enumerates.

A plan is a tuple of `Fault`s armed in one run: two faults on different
ranks, skew on several ranks at once, a crash after a delay. Plans are drawn
from an exploration's recorded points, so every drawn fault fires where the
golden run had an operation, and hypothesis shrinks a failing plan toward
fewer faults at earlier points. A failing example's message carries the
`ckpt-harness explore ... --case PLAN` line that replays it.

    base = baseline("tests.planted.checkpointers:ReferenceCheckpointer")

    @given(data=st.data())
    def test_two_faults(data):
        check(base, data.draw(fault_plans(base, max_faults=2)))
"""

from __future__ import annotations

from typing import Sequence

from hypothesis import strategies as st

from ckpt_harness.pipeline.baseline import Baseline
from ckpt_harness.pipeline.cases import Case, run_case
from ckpt_harness.config import DEFAULT_FAULTS
from ckpt_harness.errors import UsageError
from ckpt_harness.inject.faults import Fault, applicable_kinds
from ckpt_harness.verdict import CaseResult, Verdict


def fault_plans(base: Baseline, faults: Sequence[str] = (*DEFAULT_FAULTS, "delay"), max_faults: int = 2,
                delays: Sequence[float] = (0.05, 0.3)) -> st.SearchStrategy[tuple[Fault, ...]]:
    """One to `max_faults` faults at distinct points of the broken save."""
    singles = [(p, k) for p in base.points for k in applicable_kinds(p.op, tuple(faults))]
    if not singles:
        raise UsageError(f"no point of save {base.k} takes any of {', '.join(faults)}")
    picks = st.lists(st.sampled_from(singles), min_size=1, max_size=max_faults,
                     unique_by=lambda pk: (pk[0].rank, pk[0].index))
    return picks.flatmap(lambda chosen: st.tuples(*(_fault(p, k, delays) for p, k in chosen)))


def skews(base: Baseline, delays: Sequence[float] = (0.05, 0.3)) -> st.SearchStrategy[tuple[Fault, ...]]:
    """A delay on each of several ranks at once, each at one of its own points."""
    by_rank: dict[int, list] = {}
    for p in base.points:
        by_rank.setdefault(p.rank, []).append(p)
    ranks = sorted(by_rank)
    return st.lists(st.sampled_from(ranks), min_size=1, max_size=len(ranks), unique=True).flatmap(
        lambda chosen: st.tuples(*(st.sampled_from(by_rank[r]).flatmap(lambda p: _fault(p, "delay", delays))
                                   for r in sorted(chosen)))
    )


def _fault(point, kind: str, delays: Sequence[float]) -> st.SearchStrategy[Fault]:
    if kind != "delay":
        return st.just(point.fault(kind))
    return st.sampled_from(list(delays)).map(lambda s: point.fault(kind, s))


def check(base: Baseline, plan: tuple[Fault, ...]) -> CaseResult:
    """Run `plan` as one case; fail with its verdict and repro line unless it passes."""
    result = run_case(base, Case.of(plan, base.points))
    if result.verdict is not Verdict.PASS:
        raise AssertionError(
            f"{result.case}: {result.check} {result.verdict.value.upper()} — {result.summary}\n"
            f"{result.details}\nrepro: {base.repro(result.case)}"
        )
    return result
