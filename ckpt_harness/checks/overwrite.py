"""Saving into a step directory that already exists.

An earlier run leaves the directory that save k creates (with seed + 1 so
that its bytes differ, except for a complete directory: that one is as the
job itself would write it, so resuming it is as good as writing it again); no pointer or marker of it is copied, as after a restart
into an old output directory or a crashed save. Then the job starts from
scratch and saves k into it, with `ctx.overwrite` on and off. States of the
directory found:

- complete: everything the earlier run's save k wrote;
- partial: debris of a crashed save, half its files gone and one cut short;
- larger-world: a complete save of a run with twice the ranks (extra shards).

Accepted: the directory replaced with no stale file left in it, then a
bitwise resume of the new save; or a refusal on every rank that left every
file of the directory as it was; or (a complete directory only) a resume of
it as found. An `overwrite=True` that ends in a refusal of a complete
directory is the flag ignored.
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.report import CaseResult, Verdict
from ckpt_harness.scenario import Bench, Scenario, ScenarioResult, not_applicable, summarize

PARAMS = {"state": "complete", "overwrite": (True, False), "steps": 6, "save_every": 2}
STATES = ("complete", "partial", "larger-world")


def validate(params: dict) -> Optional[str]:
    if params["state"] not in STATES:
        return f"state must be one of {', '.join(STATES)}, got {params['state']!r}"
    if not params["overwrite"]:
        return "overwrite must list at least one of true, false"
    return None


def run(bench: Bench, scenario: Scenario, only: Optional[Sequence[str]] = None) -> ScenarioResult:
    from ckpt_harness.launch import MAX_WORLD_SIZE

    p = scenario.params
    ex, problem = bench.exploration(steps=p["steps"], save_every=p["save_every"], save="first")
    if problem is not None:
        return summarize(bench, scenario, [problem])
    world = bench.world_size * (2 if p["state"] == "larger-world" else 1)
    if world > MAX_WORLD_SIZE:
        return not_applicable(bench, scenario, f"needs an earlier run at world size {world} (at most {MAX_WORLD_SIZE})")
    seed = ex.s.seed + (p["state"] != "complete")
    found = bench.memo(("earlier run", world, seed), lambda: _earlier_run(bench, ex, world, seed))
    if isinstance(found, CaseResult):
        return summarize(bench, scenario, [found])
    earlier_dir, tops, earlier_saved = found
    template = bench.root / scenario.name / "template"
    for top in tops:
        shutil.copytree(earlier_dir / top, template / top)
    if p["state"] == "partial":
        _wreck(template)
    results = []
    for flag in p["overwrite"]:
        case = f"overwrite={'on' if flag else 'off'}"
        if only and case not in only:
            continue
        results.append(_case(bench, scenario, ex, template, tops, earlier_saved if world == bench.world_size else None,
                             flag, case))
    return summarize(bench, scenario, results)


def _earlier_run(bench: Bench, ex, world: int, seed: int):
    """The earlier run's checkpoint dir, the top-level directories its save k
    created (not pointer files), and the states it saved."""
    from ckpt_harness.explore import _written_in

    settings = dataclasses.replace(ex.s, world_size=world, seed=seed)
    root = bench.root / f"earlier-ws{world}-seed{seed}"
    run = settings.launch("earlier run", settings.plan(root / "ckpt", ex.k), root / "run")
    problem = oracle.health(run)
    if problem is not None:
        return CaseResult("earlier run", "live", Verdict.UNKNOWN,
                          f"the earlier run that leaves the directory failed: {problem[0]}", problem[1])
    written = _written_in(run, f"save {ex.k}")
    tops = sorted({w.split("/")[0] for w in written} - {".", ""})
    tops = [t for t in tops if (root / "ckpt" / t).is_dir()]
    if not tops:
        return CaseResult("earlier run", "layout", Verdict.UNKNOWN,
                          f"save {ex.k} created no directory of its own: there is no step directory to pre-populate")
    return root / "ckpt", tops, run.states("saved", ex.k)


def _wreck(template: Path) -> None:
    """What a save killed halfway leaves: every other file gone, the first cut to half."""
    files = sorted(p for p in template.rglob("*") if p.is_file())
    for gone in files[1::2]:
        gone.unlink()
    with open(files[0], "r+b") as f:
        f.truncate(files[0].stat().st_size // 2)


def _snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _case(bench: Bench, scenario: Scenario, ex, template: Path, tops: list[str], earlier_saved, flag: bool,
          case: str) -> CaseResult:
    from ckpt_harness.explore import PROPAGATION

    state = scenario.params["state"]
    repro = bench.scenario_repro(scenario, case)
    case_dir = bench.root / scenario.name / case
    ckpt = case_dir / "ckpt"
    shutil.copytree(template, ckpt)
    before = _snapshot(ckpt)
    settings = dataclasses.replace(ex.s, overwrite=flag)
    run = settings.launch("overwriting run", settings.plan(ckpt, ex.k, trace_files=False), case_dir / "run",
                          failure_grace=PROPAGATION)
    where = ", ".join(tops)
    result = lambda verdict, summary, details="": CaseResult(  # noqa: E731
        case, scenario.property, verdict, f"{state} {where}, overwrite={flag}: {summary}", details,
        repro if verdict is not Verdict.PASS else None)

    loaded = {s for s in run.loaded_steps().values() if s is not None}
    if loaded:
        if state == "complete" and earlier_saved is not None and oracle.health(run) is None:
            same = oracle.judge_same_state(case, "state after load", earlier_saved, run.states("loaded"),
                                           "state after load vs. the earlier run's save", None)
            if same.verdict is Verdict.PASS:
                return result(Verdict.PASS, "resumed the complete checkpoint it found instead of writing over it")
            return result(Verdict.FAIL, f"resumed the checkpoint it found, wrongly: {same.summary}", same.details)
        return result(Verdict.FAIL, f"resumed from the {state} directory an earlier run left "
                                    f"(load() returned {sorted(loaded)})")
    problem = oracle.health(run)
    if problem is not None:
        refused = not run.outcome.timed_out and all(r.outcome.status in ("failed", "crashed") for r in run.ranks)
        if not refused:
            return result(Verdict.FAIL, problem[0], problem[1])
        after = _snapshot(ckpt)
        changed = [f for f in before if after.get(f) != before[f]]
        message = oracle.classify_resume(run, {}, ex.k, None).detail
        if changed:
            return result(Verdict.FAIL, f"refused, but only after changing {_few(changed)}: {message}")
        if flag and state == "complete":
            return result(Verdict.FAIL, f"overwrite=True ignored: the save refused: {message}")
        return result(Verdict.PASS, f"refused on every rank, directory untouched: {message}")
    after = _snapshot(ckpt)
    committed = _snapshot(ex.committed_dir)
    under = lambda f: f.split("/")[0] in tops  # noqa: E731
    stale = [f for f in after if under(f) and f not in committed]
    kept = [f for f in after if under(f) and before.get(f) == after[f] and committed.get(f) != after[f]]
    if stale or kept:
        return result(Verdict.FAIL, f"stale files of the earlier run left in place: {_few(stale + kept)}")
    resumed = settings.launch("resumed run", settings.plan(ckpt, trace_files=False), case_dir / "resume",
                              failure_grace=PROPAGATION)
    outcome = oracle.classify_resume(resumed, ex.saved, ex.k, None)
    if outcome.kind != "S_k":
        problem = oracle.health(resumed)
        return result(Verdict.FAIL, f"replaced, but the resume gave {outcome}", problem[1] if problem else "")
    final = oracle.judge_same_state(case, "faithful", ex.golden.states("final"), resumed.states("final"),
                                    "final state vs. uninterrupted run", None)
    if final.verdict is not Verdict.PASS:
        return result(Verdict.FAIL, f"replaced and resumed, then {final.summary}", final.details)
    return result(Verdict.PASS, "replaced with no stale file; resumed bitwise")


def _few(paths: list[str], limit: int = 3) -> str:
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
