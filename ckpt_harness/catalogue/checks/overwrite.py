"""Saving into a step directory that already exists.

An earlier run leaves the directory that save k creates (with seed + 1 so
that its bytes differ, except for a complete directory: that one is as the
job itself would write it, so resuming it is as good as writing it again);
no pointer or marker of it is copied, as after a restart into an old output
directory or a crashed save. Then the job starts from scratch and saves k
into it, with `ctx.overwrite` on and off. States of the directory found:

- complete: everything the earlier run's save k wrote;
- partial: debris of a crashed save, half its files gone and one cut short;
- larger-world: a complete save of a run with twice the ranks (extra shards).

What is accepted is the oracle's (`judge_overwriting_save`, `judge_replaced`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import shutil
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence, Union

from ckpt_harness import oracle, phase
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import SETTINGS, Setting, ends_group
from ckpt_harness.records import Kind
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.targets import PROPAGATION, RunRequest
from ckpt_harness.verdict import CaseResult

STATES = ("complete", "partial", "larger-world")


def _flags(value: Any) -> Optional[str]:
    if isinstance(value, tuple) and value and all(isinstance(v, bool) for v in value):
        return None
    return "must list at least one of true, false"


@dataclasses.dataclass(frozen=True)
class Earlier:
    """The directory an earlier run left: its checkpoint dir, the top-level
    directories its save k created (not pointer files), the states it saved."""

    ckpt: Path
    tops: list[str]
    saved: Optional[Mapping[int, Any]]


class Overwrite:
    params = (
        Setting("state", str, "complete", "what the earlier run left", choices=STATES),
        Setting("overwrite", tuple, (True, False), "the values of ctx.overwrite to save with", rule=_flags),
        *run_settings("save_every", steps=6),
    )
    #: It saves with the job's ctx.overwrite on and off.
    requires = ("overwrite_flag",)

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.launch import MAX_WORLD_SIZE

        p = scenario.params
        # `overwrite` here lists the flag's values to try, so only the run's shape goes into the target.
        shape = {"steps": p["steps"], "save_every": p["save_every"]}
        base = bench.baseline(bench.target_for(shape), bench.plan(shape, save="first"), committed=True)
        if base.committed is None:
            return [oracle.cannot_judge("committed run", "live", f"the run stopped after save {base.k} failed")]
        world = bench.world_size * (2 if p["state"] == "larger-world" else 1)
        if world > MAX_WORLD_SIZE:
            raise NotApplicable(f"needs an earlier run at world size {world} (at most {MAX_WORLD_SIZE})")
        # A seed of its own, so that a file of the earlier run left in place shows (a complete one is as the
        # target would write it). A script is told the seed through its arguments (script_args), or is n/a.
        seed = None if p["state"] == "complete" else base.target.values.get("seed", SETTINGS["seed"].default) + 1
        earlier_target = base.target.replace(world_size=world, **({} if seed is None else {"seed": seed}))
        earlier = bench.memo(("earlier run", base.runs, world, seed),
                             lambda: _earlier_run(bench, base, earlier_target, seed))
        if isinstance(earlier, CaseResult):
            return [earlier]
        template = bench.root / scenario.name / "template"
        for top in earlier.tops:
            shutil.copytree(earlier.ckpt / top, template / top)
        if p["state"] == "partial":
            _wreck(template)
        results = []
        for flag in p["overwrite"]:
            case = f"overwrite={'on' if flag else 'off'}"
            if not only or case in only:
                results.append(_case(bench, scenario, base, earlier, template, flag, case))
        return results


def _earlier_run(bench, base, target, seed: Optional[int]) -> Union[Earlier, CaseResult]:
    world = target.world_size
    root = bench.root / (f"earlier-ws{world}" + ("" if seed is None else f"-seed{seed}"))
    run = target.run(RunRequest("earlier run", stop_after_save=base.k), root / "ckpt", root / "run")
    problem = oracle.health(run)
    if problem is not None:
        return oracle.cannot_judge("earlier run", "live",
                                   f"the earlier run that leaves the directory failed: {problem.summary}",
                                   problem.details)
    written = run.created_in(phase.save(base.k))
    tops = [t for t in sorted({w.split("/")[0] for w in written} - {".", ""}) if (root / "ckpt" / t).is_dir()]
    if not tops:
        return oracle.cannot_judge("earlier run", "layout", f"save {base.k} created no directory of its own: "
                                                            "there is no step directory to pre-populate")
    return Earlier(root / "ckpt", tops, run.states(Kind.SAVED, base.k) if world == bench.world_size else None)


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


def _case(bench, scenario, base, earlier: Earlier, template: Path, flag: bool, case: str) -> CaseResult:
    clock = CaseClock()
    result = _overwrite(bench, scenario, base, earlier, template, flag, case, clock)
    return clock.stamp(result, every=bench.timelines == "all")


def _overwrite(bench, scenario, base, earlier: Earlier, template: Path, flag: bool, case: str,
               clock: CaseClock) -> CaseResult:
    state = scenario.params["state"]
    repro = bench.repro(scenario, case)
    label = f"{state} {', '.join(earlier.tops)}, overwrite={flag}"
    case_dir = bench.root / scenario.name / case
    ckpt = case_dir / "ckpt"
    shutil.copytree(template, ckpt)
    before = _snapshot(ckpt)
    target = base.target.replace(overwrite=flag)
    run = clock.run(lambda: target.run(RunRequest("overwriting run", stop_after_save=base.k, trace_files=False,
                                                  failure_grace=PROPAGATION), ckpt, case_dir / "run"), broken=base.k)
    decided = oracle.judge_overwriting_save(
        case, scenario.property, run, label=label, state=state, flag=flag, earlier_saved=earlier.saved,
        before=before, after=_snapshot(ckpt), committed=_snapshot(base.committed), tops=earlier.tops, repro=repro,
        ends_group=ends_group(target.values), ref=base.reference)
    if decided is not None:
        return decided
    resumed = clock.run(lambda: target.run(RunRequest("resumed run", trace_files=False, failure_grace=PROPAGATION),
                                           ckpt, case_dir / "resume"), resume=True)
    clock.judging()
    return oracle.judge_replaced(case, scenario.property, resumed, base.reference, label=label, repro=repro)


CHECK = Overwrite()
