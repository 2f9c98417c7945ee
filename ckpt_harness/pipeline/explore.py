"""Systematic exploration: break one save at every point, judge every resume.

target + plan → baseline (golden run, its fault points, the committed
save) → cases (each fault kind at each point, power loss after the save,
each corruption of each committed file) → each case run and judged by the
oracle → report. The same pipeline for every target: what a script cannot
say in advance (its save steps, which ranks make each save) its golden run
tells (`Target.knowing`), and the save broken is picked among those.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from ckpt_harness import oracle, phase, targets
from ckpt_harness.config import ExplorePlan
from ckpt_harness.pipeline import baseline as baselines
from ckpt_harness.pipeline import budget, confirm
from ckpt_harness.pipeline.baseline import Baseline, BaselineFailed
from ckpt_harness.pipeline.cases import named, plan_cases, run_cases
from ckpt_harness.pipeline.workdir import prepare_workdir
from ckpt_harness.records.runs import Run
from ckpt_harness.report import Report
from ckpt_harness.targets import RunRequest, Target
from ckpt_harness.verdict import CaseResult

#: `progress(done, total, result)`, called as each case finishes.
ProgressFn = Callable[[int, int, CaseResult], None]


def explore(job: Union[str, type], *, workdir: Optional[Union[str, Path]] = None,
            cases: Optional[Sequence[str]] = None, progress: Optional[ProgressFn] = None, **settings: Any) -> Report:
    """Break save `save` (default: the second) at every point; judge each resume.

    `settings` are those of `ExploreConfig` (`faults`, `corruptions`, `ops`,
    `durability`, `keep_last`, `nodes`, ...). `cases` replays only the named
    cases (the names the report prints, or any fault plan such as
    `crash@r0:save4/rename(latest.tmp->latest)+delay@r1:save4/barrier#2`).
    `progress(done, total, result)` is called after each case. `job` may also be a target of any kind
    (`ckpt_harness.targets`), ready made; `settings` are then the plan's.
    """
    target, plan = targets.resolve(job, "explore", settings)
    return run_exploration(target, plan, prepare_workdir(workdir), cases, progress)


def explore_script(script: str, *, workdir: Optional[Union[str, Path]] = None,
                   cases: Optional[Sequence[str]] = None, progress: Optional[ProgressFn] = None,
                   **settings: Any) -> Report:
    """Break save `save` (default: the second the script makes) of `script`
    at every point; judge each resume.

    `script` is its command as after ``python``, with ``{ckpt_dir}`` where the
    checkpoint directory goes; `settings` are those of `ScriptExploreConfig`
    (`nproc_per_node`, `nnodes`, `faults`, `ops`, `corruptions`, ...).
    `cases` replays only the named cases (the names the report prints).
    """
    target, plan = targets.resolve(script, "explore", settings, kind="script")
    return run_exploration(target, plan, prepare_workdir(workdir), cases, progress)


def run_exploration(target: Target, plan: ExplorePlan, root: Path, only: Optional[Sequence[str]] = None,
                    progress: Optional[ProgressFn] = None) -> Report:
    target = target.breakable()
    started = time.monotonic()

    def report(results: list[CaseResult], warnings: tuple[str, ...] = (), note: str = "") -> Report:
        return Report(target.name, target.world_size, results, time.monotonic() - started, "explore", note,
                      {**target.values, **plan.values}, warnings, target.noun)

    try:
        base = baselines.prepare(target, plan, root)
    except BaselineFailed as failed:
        return report([failed.result])
    results, warnings = explore_baseline(base, only, progress)
    return report(results, warnings, describe(base))


def describe(base: Baseline) -> str:
    """The note of an exploration's report: which save, among which, under which models."""
    steps = "" if base.target.caps.steps_known else \
        f" (the {base.target.noun} saved at steps {', '.join(map(str, base.target.save_steps() or []))})"
    launcher = base.target.values.get("launcher", "elastic, torchrun's")
    # on a bucket no model stands between a case and what the server kept (`storage`)
    model = f"durability model {base.plan.durability}" if base.target.caps.has("power_loss") else \
        "every case against the object store's server"
    return f"save {base.k} broken{steps}; {model}; launcher {launcher}"


def explore_baseline(base: Baseline, only: Optional[Sequence[str]] = None,
                     progress: Optional[ProgressFn] = None) -> tuple[list[CaseResult], tuple[str, ...]]:
    """Every case of a prepared baseline (or the `only` named), run and judged;
    with what a person must know about how they were run."""
    warnings = (base.cold_because,) if base.cold_because else ()
    warnings += (baselines.unseen_warning(base.unseen),) if base.unseen else ()
    if base.replay_gap and base.plan.derive_states and base.target.caps.has("power_loss"):  # a bucket: expected
        warnings += (f"no case state was derived from the golden run's trace, every case ran its faulted save: "
                     f"{base.replay_gap}",)
    nothing = base.nothing_to_break()
    if nothing is not None:
        return [nothing], warnings
    cases = plan_cases(base)
    if only:
        cases = named(base, only, cases)
    elif base.plan.max_cases is not None:
        cases, left = budget.within(cases, base.plan.max_cases)
        warnings += (budget.left_out(base.plan.max_cases, cases, left, base.target.repro("explore", base.plan.values)),
                     ) if left else ()
    missing = base.nothing_to_corrupt()
    shared = _single_writer(base)
    return ([shared] if not shared.verdict.ok and not only else []) + run_cases(base, cases, progress) + (
        [missing] if missing is not None and not only else []), warnings


def _single_writer(base: Baseline) -> CaseResult:
    """Did two ranks write one file in the golden run; judged again on the
    cold golden run (`Baseline.cold`) if it said so of one that started warm."""
    def judged(of: Baseline) -> CaseResult:
        result = oracle.judge_single_writer("golden", of.golden, of.target.repro("explore", of.plan.values, "golden"))
        return dataclasses.replace(result, warm=of.golden.warm_started)

    warm = judged(base)

    def cold() -> list[CaseResult]:
        try:
            return [judged(base.cold())]
        except BaselineFailed as failed:
            return [oracle.cannot_judge("golden", warm.check, f"the golden run's writers could not be judged "
                                        f"again with cold starts: {failed.result.summary}")]

    return confirm.confirm([warm], cold)[0]


def baseline(job: Union[str, type], *, workdir: Optional[Union[str, Path]] = None, **settings: Any) -> Baseline:
    """A prepared baseline to run cases of your own against (see `strategies`);
    raises `BaselineFailed` if the golden run fails."""
    target, plan = targets.resolve(job, "explore", settings)
    return baselines.prepare(target, plan, prepare_workdir(workdir), committed_run=True)


def trace(target: Target, plan: ExplorePlan, root: Path) -> tuple[Run, Optional[str]]:
    """Record a clean run of `target`; return it and the phase of the save
    `plan` breaks (None: it made no save whose step can be told)."""
    run = target.run(RunRequest("trace"), root / "ckpt", root / "run")
    known = target.knowing(run)
    return run, phase.save(baselines.broken(known, plan)) if known.save_steps() else None
