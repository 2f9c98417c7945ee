"""World-size change: save at N ranks, resume at M, compare `full_state`.

Only the world-size independent state can be compared (RNG streams and data
shards are per rank and have no counterpart at M), so the job says what that
is through `Job.full_state`; a job without it is "n/a" here. The resumed
run must also train to the end at M.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.report import CaseResult, Verdict
from ckpt_harness.scenario import Bench, Scenario, ScenarioResult, not_applicable, summarize

PARAMS = {"resume_at": "double", "steps": 6, "save_every": 2}


def validate(params: dict) -> Optional[str]:
    if params["resume_at"] not in ("double", "half"):
        return f"resume_at must be 'double' or 'half', got {params['resume_at']!r}"
    return None


def run(bench: Bench, scenario: Scenario, only: Optional[Sequence[str]] = None) -> ScenarioResult:
    from ckpt_harness.explore import PROPAGATION
    from ckpt_harness.launch import MAX_WORLD_SIZE
    from ckpt_harness.verify import Settings

    if not bench.job_class.reshardable():
        return not_applicable(bench, scenario, "the job defines no full_state(ctx), so it claims no world-size change")
    p = scenario.params
    n = bench.world_size
    m = n * 2 if p["resume_at"] == "double" else n // 2
    if not 1 <= m <= MAX_WORLD_SIZE or m == n:
        return not_applicable(bench, scenario, f"world size {n} has no {p['resume_at']} in 1..{MAX_WORLD_SIZE}")
    case = f"ws{n}->ws{m}"
    repro = bench.scenario_repro(scenario, case)
    saver = Settings(bench.ref, world_size=n, total_steps=p["steps"], save_every=p["save_every"], timeout=bench.timeout)
    k = saver.save_steps[-1] if len(saver.save_steps) < 2 else saver.save_steps[-2]
    root = bench.root / scenario.name
    saved = saver.launch("saving run", saver.plan(root / "ckpt", k, trace_files=False, full_state=True), root / "save")

    def result(verdict: Verdict, summary: str, details: str = "") -> ScenarioResult:
        return summarize(bench, scenario, [CaseResult(case, scenario.property, verdict, summary, details,
                                                      repro if verdict is not Verdict.PASS else None)])

    problem = oracle.health(saved)
    if problem is not None:
        return result(Verdict.FAIL, f"the run at world size {n} failed: {problem[0]}", problem[1])
    resumer = dataclasses.replace(saver, world_size=m)
    resumed = resumer.launch("resumed run", resumer.plan(root / "ckpt", trace_files=False, full_state=True),
                             root / "resume", failure_grace=PROPAGATION)
    loaded = resumed.states("loaded full")
    if loaded is None:
        problem = oracle.health(resumed)
        return result(Verdict.FAIL, f"resume at world size {m}: {problem[0] if problem else 'no state after load'}",
                      problem[1] if problem else "")
    steps = set(resumed.loaded_steps().values())
    if steps != {k}:
        return result(Verdict.FAIL, f"resume at world size {m}: load() returned {sorted(steps, key=str)}, expected {k}")
    reference = saved.states("saved full", k)[0]
    same = oracle.judge_same_state(case, scenario.property, {r: reference for r in loaded}, loaded,
                                   f"full state at world size {m} vs. saved at {n}", repro)
    if same.verdict is not Verdict.PASS:
        return result(Verdict.FAIL, same.summary, same.details)
    problem = oracle.health(resumed)
    if problem is not None:
        return result(Verdict.FAIL, f"resumed at world size {m}, then {problem[0]}", problem[1])
    return result(Verdict.PASS, f"save {k} at {n} ranks resumed at {m}: {same.summary}")
