"""Fault-free verification: does every save resume bitwise?

A golden run records the state after every save and at the end. Then, for
each save step k, one run stops right after save k returned on every rank
(the group is torn down, as a preemption would) and a fresh group resumes
from the same directory through the job's own `load`. The oracle judges the
step `load` reports, the state right after it, and the final state.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ckpt_harness import oracle
from ckpt_harness.config import RunConfig
from ckpt_harness.errors import UsageError
from ckpt_harness.jobref import load, resolve
from ckpt_harness.records import Kind, Run
from ckpt_harness.report import Report
from ckpt_harness.run import launch, prepare_workdir, repro, require_backend
from ckpt_harness.verdict import CaseResult, Verdict


def verify(job: Union[str, type], *, workdir: Optional[Union[str, Path]] = None,
           cases: Optional[Sequence[str]] = None, stop: str = "graceful", **settings: Any) -> Report:
    """Verify that `job` resumes bitwise from every save; return the report.

    `job` is a Job subclass, a registered name or "module:Class"; `settings`
    are those of `RunConfig` (`world_size`, `steps`, `save_every`, `nodes`,
    ...). Runs go under `workdir` (a fresh temporary directory if None).
    `cases` limits the resume cases to names like "resume@4"; the golden run
    always runs. `stop="hard"` stops without waiting for a save in flight
    (cases "hard@4"; jobs that save in the background only).
    """
    ref, _ = resolve(job)
    return run_verification(RunConfig.build(ref, **settings), prepare_workdir(workdir), cases, stop)


#: The case of a hard stop after save k: "hard@4" (`RunPlan.hard_stop`).
HARD = "hard"


def case_names(config: RunConfig, stop: str = "graceful") -> list[str]:
    """`resume@k` for each save (a graceful stop), or `hard@k` (a hard one)."""
    return [f"{HARD if stop == HARD else 'resume'}@{k}" for k in config.save_steps]


def run_verification(config: RunConfig, root: Path, cases: Optional[Sequence[str]] = None,
                     stop: str = "graceful") -> Report:
    """`stop="hard"` stops without waiting for a background save in flight
    (`hard@k` cases, for jobs that save in the background); named `cases`
    may be of either kind, as repro lines give them."""
    started = time.monotonic()
    known = case_names(config) + (case_names(config, HARD) if load(config.job).saves_in_background() else [])
    unknown = [c for c in cases or () if c not in known and c != "golden"]
    if unknown:
        raise UsageError(f"unknown case {', '.join(unknown)}: choose from golden, {', '.join(known)}")
    require_backend(config)
    chosen = [c for c in (known if cases else case_names(config, stop)) if not cases or c in cases]
    rotates = config.keep_last is not None  # then the trace tells which entries each save made
    golden = launch(config, "golden", root / "golden" / "ckpt", root / "golden" / "run", trace_files=rotates)
    results = [oracle.judge_golden("golden", golden, repro("run", config, "golden"))]
    if results[0].verdict is Verdict.PASS:  # else there is nothing to compare against
        results.append(oracle.judge_fresh_start("golden", golden, repro("run", config, "golden")))
        if rotates:
            results.append(oracle.judge_retention("golden", golden, config.keep_last, repro("run", config, "golden")))
        for case in chosen:
            results += resume_case(config, root / case, case, golden)
    return Report(config.job.display, config.world_size, results, time.monotonic() - started, settings=config.values)


def resume_case(config: RunConfig, root: Path, case: str, golden: Run) -> list[CaseResult]:
    """Stop right after save k, resume in a fresh group, judge the load and the end."""
    kind, _, k = case.partition("@")
    step, hard = int(k), kind == HARD
    line = repro("run", config, case)
    ckpt = root / "ckpt"
    stopped = launch(config, "stopped run", ckpt, root / "stop", stop_after_save=step, hard_stop=hard,
                     trace_files=False)
    live = oracle.judge_golden(case, stopped, line)
    if live.verdict is not Verdict.PASS:
        return [live]
    nondeterminism = oracle.judge_deterministic(case, golden, stopped, step)
    results = [nondeterminism] if nondeterminism else []
    resumed = launch(config, "resumed run", ckpt, root / "resume", trace_files=False)
    if hard:
        return results + [oracle.undecided_if(nondeterminism,
                                              oracle.judge_hard_stop(case, golden, stopped, resumed, step, line))]
    live = oracle.judge_live(case, resumed, line)
    results.append(live)
    if not resumed.loaded_steps():  # judged from what it did instead
        inferred = oracle.judge_unreported_load(case, resumed, step, golden.saved_steps(), line)
        results += [inferred] if inferred else []
    elif resumed.states(Kind.LOADED) is not None:  # a resume that loaded and then failed still tells what it loaded
        results += [
            oracle.judge_load_step(case, resumed, step, line),
            oracle.judge_same_state(case, "state after load", stopped.states(Kind.SAVED, step),
                                    resumed.states(Kind.LOADED), f"state after load vs. state saved at step {step}",
                                    line),
        ]
    if live.verdict is Verdict.PASS:
        final = oracle.judge_same_state(case, "final state", golden.states(Kind.FINAL), resumed.states(Kind.FINAL),
                                        "final state vs. uninterrupted run", line)
        bitwise = any(r.check == "state after load" and r.verdict is Verdict.PASS for r in results)
        final = oracle.float_noise(final, golden.states(Kind.FINAL), resumed.states(Kind.FINAL), loaded_bitwise=bitwise)
        results.append(oracle.undecided_if(nondeterminism, final))
    return results
