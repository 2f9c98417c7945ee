"""Faults injected at the points of one save, as `explore` does, narrowed to
the kinds, operations and corruptions a scenario names.

Scenarios with equal run settings share one golden run and one committed
save through the bench; only their cases differ.
"""

from __future__ import annotations

from typing import Optional, Sequence

from ckpt_harness.scenario import Bench, Scenario, ScenarioResult, not_applicable, summarize

PARAMS = {
    "faults": (),           # fault kinds injected at every matching point
    "corruptions": (),      # damage applied to each file of the committed save
    "ops": (),              # only points of these operations (default: all)
    "after": False,         # also: power loss right after the save returned
    "save": "second",       # which save to break: first, second or last
    "steps": 6,
    "save_every": 2,
    "keep_last": None,      # ask the job to rotate (its rotation joins the save's points)
    "rotates": False,       # n/a unless the save deletes something (the job honours keep_last)
    "nodes": 1,             # simulated nodes (LOCAL_RANK / GROUP_RANK per node, one file system)
    "durability": "strict",
    "delay": 0.5,           # seconds of a delay fault
    "hang_timeout": 3.0,    # deadline of a run with a hang fault
}


def validate(params: dict) -> Optional[str]:
    from ckpt_harness.inject.corrupt import CORRUPTIONS
    from ckpt_harness.inject.faults import KINDS, OPS

    for key, known in (("faults", KINDS), ("corruptions", CORRUPTIONS), ("ops", OPS)):
        bad = [v for v in params[key] if v not in known]
        if bad:
            return f"unknown {key} {', '.join(bad)}; choose from {', '.join(known)}"
    if params["save"] not in ("first", "second", "last"):
        return f"save must be 'first', 'second' or 'last', got {params['save']!r}"
    if params["rotates"] and params["keep_last"] is None:
        return "rotates = true needs keep_last"
    if not (params["faults"] or params["corruptions"] or params["after"]):
        return "nothing to inject: set faults, corruptions or after = true"
    if params["durability"] not in ("strict", "ordered"):
        return f"durability must be 'strict' or 'ordered', got {params['durability']!r}"
    return None


def run(bench: Bench, scenario: Scenario, only: Optional[Sequence[str]] = None) -> ScenarioResult:
    from ckpt_harness.explore import plan_cases

    p = scenario.params
    ex, problem = bench.exploration(steps=p["steps"], save_every=p["save_every"], save=p["save"],
                                    keep_last=p["keep_last"], nodes=p["nodes"], durability=p["durability"],
                                    hang_timeout=p["hang_timeout"])
    if problem is not None:
        return summarize(bench, scenario, [problem])
    if not ex.points:
        return summarize(bench, scenario, [ex.nothing_to_break()])
    if p["rotates"] and not any(pt.op in ("unlink", "rmtree", "rmdir") for pt in ex.points):
        return not_applicable(bench, scenario, f"with keep_last={p['keep_last']} save {ex.k} deleted nothing: "
                                               "the job does not rotate its checkpoints")
    points = [pt for pt in ex.points if not p["ops"] or pt.op in p["ops"]]
    cases = plan_cases(points, p["faults"], ex.committed, p["corruptions"], p["after"], p["delay"])
    if only:
        by_name = {c.name: c for c in cases}
        cases = [by_name.get(name) or ex.case(name) for name in only]
    progress = (lambda done, total, _: bench.progress(done, total)) if bench.progress else None
    return summarize(bench, scenario, ex.run_cases(cases, progress))
