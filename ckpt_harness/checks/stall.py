"""One rank late, or blocked, before the collectives of the final save.

The final save is where a finished job hangs: training is over, one rank is
slow or stuck, and its peers wait in the save's first collective until the
process group's timeout (30 minutes on NCCL by default) while the job looks
alive. `late` delays each rank in turn there and expects the run to end exactly
as the uninterrupted one (no resume: a delay kills nothing). `block` stops each rank in turn there for
good: the job passes if every other rank raises within `hang_timeout`
(e.g. a monitored barrier or a store wait with a timeout); otherwise it is a
hang, reported with every rank's stack and the collective it is in.
"""

from __future__ import annotations

import concurrent.futures
from typing import Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.inject.faults import Fault
from ckpt_harness.report import CaseResult, Verdict
from ckpt_harness.scenario import Bench, Scenario, ScenarioResult, summarize

PARAMS = {"mode": "block", "seconds": 2.0, "hang_timeout": 5.0, "steps": 6, "save_every": 2}


def validate(params: dict) -> Optional[str]:
    if params["mode"] not in ("block", "late"):
        return f"mode must be 'block' or 'late', got {params['mode']!r}"
    return None


def run(bench: Bench, scenario: Scenario, only: Optional[Sequence[str]] = None) -> ScenarioResult:
    from ckpt_harness.explore import Case

    p = scenario.params
    ex, problem = bench.exploration(steps=p["steps"], save_every=p["save_every"], save="last",
                                    hang_timeout=p["hang_timeout"])
    if problem is not None:
        return summarize(bench, scenario, [problem])
    if not ex.points:
        return summarize(bench, scenario, [ex.nothing_to_break()])
    kind = "hang" if p["mode"] == "block" else "delay"
    cases = []
    for rank in sorted({pt.rank for pt in ex.points}):
        mine = [pt for pt in ex.points if pt.rank == rank]
        point = next((pt for pt in mine if pt.op == "collective"), mine[0])
        cases.append(Case.of((Fault(kind, rank, point.phase, point.index, p["seconds"]),), [point]))
    if only:
        cases = [c for c in cases if c.name in only] or [ex.case(name) for name in only]
    judge = _blocked if kind == "hang" else _late
    with concurrent.futures.ThreadPoolExecutor(bench.parallel) as pool:
        return summarize(bench, scenario, list(pool.map(lambda case: judge(bench, scenario, ex, case), cases)))


def _launch(bench: Bench, scenario: Scenario, ex, case, what: str):
    from ckpt_harness.explore import PROPAGATION

    fault, point = case.faults[0], case.points[0]
    run_dir = bench.root / scenario.name / case.name
    deadline = scenario.params["hang_timeout"] if fault.kind == "hang" else None
    run = ex.s.launch("stalled run", ex.s.plan(run_dir / "ckpt", faults=case.faults), run_dir / "run",
                      deadline=deadline, failure_grace=PROPAGATION)
    repro = bench.scenario_repro(scenario, case.name)
    where = f"rank {fault.rank} {what} before {point.op} {point.target} of {fault.phase}"
    result = lambda verdict, summary, details="": CaseResult(  # noqa: E731
        case.name, scenario.property, verdict, f"{where}: {summary}", details,
        repro if verdict is not Verdict.PASS else None)
    if not any(e["kind"] == "fault" for r in run.ranks for e in r.events):
        return run, result, result(Verdict.UNKNOWN, "the fault never fired: the run took another path than the golden one")
    return run, result, None


def _late(bench: Bench, scenario: Scenario, ex, case) -> CaseResult:
    run, result, undecided = _launch(bench, scenario, ex, case, f"{scenario.params['seconds']:g}s late")
    if undecided is not None:
        return undecided
    problem = oracle.health(run)
    if problem is not None:
        return result(Verdict.FAIL, problem[0], problem[1])
    final = oracle.judge_same_state(case.name, scenario.property, ex.golden.states("final"), run.states("final"),
                                    "final state vs. the run without delay", None)
    if final.verdict is not Verdict.PASS:
        return result(Verdict.FAIL, final.summary, final.details)
    return result(Verdict.PASS, f"the run finished as without the delay ({final.summary})")


def _blocked(bench: Bench, scenario: Scenario, ex, case) -> CaseResult:
    fault = case.faults[0]
    run, result, undecided = _launch(bench, scenario, ex, case, "blocked")
    if undecided is not None:
        return undecided
    blind = [r.rank for r in run.ranks if r.outcome.status == "hung" and r.outcome.stack is None]
    if blind:
        return result(Verdict.UNKNOWN, f"the harness got no stack from rank(s) {blind}: cannot report the hang")
    peers = [r for r in run.ranks if r.rank != fault.rank]
    problem = oracle.health(run) or ("", "")
    if all(r.outcome.status in ("failed", "crashed") for r in peers):
        first = next((r.error for r in peers if r.error), None)
        said = f": {first['type'].rpartition('.')[2]}: {first['message']}" if first else ""
        return result(Verdict.PASS, f"every other rank raised within {scenario.params['hang_timeout']:g}s{said}")
    return result(Verdict.FAIL, problem[0], problem[1])
