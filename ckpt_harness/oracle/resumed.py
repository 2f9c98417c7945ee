"""Where a resume started, when the job never said (`ctx.loaded`).

A job that owns its loop reports its load from a hook of the framework's
load; a job that forgot to pass the checkpoint to the framework never loads,
so it never reports, and retrains from scratch to the same final state. The
records still tell what it did: the first step it trained (if it names its
phases) and the saves it made again. A save is made once per save step, so
the first save of the resumed run was the first after the step it resumed
from; a run that finished without saving started after the last save.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

from ckpt_harness import phase
from ckpt_harness.inject.trace import EventKind
from ckpt_harness.oracle.problems import health
from ckpt_harness.records import Kind, Run
from ckpt_harness.verdict import CaseResult, Verdict

#: What a job adds so that its resume is judged on its state, not inferred.
REPORT_IT = "call ctx.loaded(step) once the job has loaded (ctx.loaded(None) on a fresh start)"


@dataclasses.dataclass(frozen=True)
class Inferred:
    """The step a resume started from (0: from scratch), and the evidence; step None: no evidence."""

    step: Optional[int]
    evidence: str


def infer_start(run: Run, save_steps: Sequence[int]) -> Inferred:
    """From what `run` did, the step it resumed from; `save_steps` are those of an uninterrupted run."""
    trained = [s for r in run.ranks for e in r.events if e.kind is EventKind.PHASE
               and (s := phase.step_of(e.phase, "train_step")) is not None]
    if trained:
        first = min(trained)
        return Inferred(first - 1, f"its first train step was step {first}")
    saves = sorted({rec["step"] for r in run.ranks for rec in r.records if rec["event"] == Kind.SAVED})
    if saves:
        start = max((s for s in save_steps if s < saves[0]), default=0)
        return Inferred(start, f"its first save was step {saves[0]}")
    if save_steps and health(run) is None and run.states(Kind.FINAL) is not None:
        return Inferred(save_steps[-1], f"it finished without saving, so after the last save (step {save_steps[-1]})")
    return Inferred(None, "it neither trained nor saved a step the records show")


def judge_unreported_load(case: str, resumed: Run, step: int, save_steps: Sequence[int],
                          repro: Optional[str]) -> Optional[CaseResult]:
    """"load step" of a resume after save `step` that no rank reported; None
    when nothing can be said and the run already failed (its "live" says why)."""
    inferred = infer_start(resumed, save_steps)
    silent = f"the job never reported its load (ctx.loaded), and {inferred.evidence}"
    if inferred.step == step:
        return CaseResult(case, "load step", Verdict.PASS,
                          f"{silent}: it resumed from step {step} (to compare the state after load, {REPORT_IT})")
    if inferred.step == 0:
        return CaseResult(case, "load step", Verdict.FAIL, f"the job never resumed: {silent}, though the directory "
                                                           f"held the checkpoint of step {step}", repro=repro)
    if inferred.step is not None:
        return CaseResult(case, "load step", Verdict.FAIL,
                          f"{silent}: it resumed from step {inferred.step}, expected {step}", repro=repro)
    if health(resumed) is not None:
        return None
    return CaseResult(case, "load step", Verdict.UNKNOWN, f"{silent}: nothing tells where it resumed; {REPORT_IT}",
                      repro=repro)
