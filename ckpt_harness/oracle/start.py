"""Where a resume started, and what a run saved: judged from the records alone.

A Job says where it resumed (`ctx.loaded`); one that forgot to, and every
script, does not. Then the records still tell it: the first step it
trained (if it names its phases) and the saves it made again. A save is
made once per save step, so a resume that saves a step the checkpoint
already held started before it (from scratch, as a job that never passes
the checkpoint to its framework does, retraining to the same final state).

What a run saved is read per step and rank (`saves_by_step`, all the saves
of one step merged), for saves whose step is known: a script's are found
at the save entry points it calls, and those numbered by a count of saves
(`inject.saves`) count as the final save only.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional, Sequence

from ckpt_harness import phase
from ckpt_harness.inject.trace import EventKind
from ckpt_harness.oracle import diffs
from ckpt_harness.oracle.problems import health
from ckpt_harness.records import Kind
from ckpt_harness.records.runs import Run, save_steps, saves_by_step
from ckpt_harness.state import Record
from ckpt_harness.verdict import CaseResult, Verdict

#: What a job adds so that its resume is judged on its state, not inferred.
REPORT_IT = "call ctx.loaded(step) once the job has loaded (ctx.loaded(None) on a fresh start)"


@dataclasses.dataclass(frozen=True)
class Inferred:
    """The step a resume started from (0: from scratch, or from a save of step 0), and the evidence; step
    None: no evidence."""

    step: Optional[int]
    evidence: str
    #: Step 0 is a save the run resumed from, not scratch: the uninterrupted run saved step 0 (before it
    #: trained: OLMo-core does) and this run's first save came later, so it did not start over and save 0 again.
    from_save: bool = False

    @property
    def fresh(self) -> bool:
        """It started from scratch."""
        return self.step == 0 and not self.from_save


def infer_start(run: Run, save_steps: Sequence[int]) -> Inferred:
    """From what `run` did, the step it resumed from; `save_steps` are those of an uninterrupted run."""
    trained = [s for r in run.ranks for e in r.events if e.kind is EventKind.PHASE
               and (s := phase.step_of(e.phase, "train_step")) is not None]
    if trained:
        first = min(trained)
        return Inferred(first - 1, f"its first train step was step {first}")
    # A save numbered by a count of this process's saves (`inject.saves`) restarts at 1 in every run: no evidence.
    saves = sorted({rec["step"] for r in run.ranks for rec in r.records
                    if rec["event"] == Kind.SAVED and rec.get("source") != "count"})
    if saves:
        return start_before(saves[0], save_steps)
    if save_steps and health(run) is None and run.states(Kind.FINAL) is not None:
        return Inferred(save_steps[-1], f"it finished without saving, so after the last save (step {save_steps[-1]})")
    return Inferred(None, "it neither trained nor saved a step the records show")


def start_before(first_save: int, save_steps: Sequence[int]) -> Inferred:
    """Where a run whose first save was `first_save` resumed: from the save
    before it (`save_steps`: the uninterrupted run's), else from scratch. A
    save is made once per step, so the run never held that step's checkpoint."""
    start = max((s for s in save_steps if s < first_save), default=0)
    return Inferred(start, f"its first save was step {first_save}",
                    from_save=0 in save_steps and start == 0 < first_save)


def judge_unreported_load(case: str, resumed: Run, step: int, save_steps: Sequence[int],
                          repro: Optional[str]) -> Optional[CaseResult]:
    """"load step" of a resume after save `step` that no rank reported; None
    when nothing can be said and the run already failed (its "live" says why)."""
    inferred = infer_start(resumed, save_steps)
    silent = f"no load was reported (ctx.loaded), and {inferred.evidence}"
    if inferred.step == step:
        return CaseResult(case, "load step", Verdict.PASS,
                          f"{silent}: it resumed from step {step} (to compare the state after load, {REPORT_IT})")
    if inferred.fresh:
        return CaseResult(case, "load step", Verdict.FAIL, f"the job never resumed: {silent}, though the directory "
                                                           f"held the checkpoint of step {step}", repro=repro)
    if inferred.step is not None:
        return CaseResult(case, "load step", Verdict.FAIL,
                          f"{silent}: it resumed from step {inferred.step}, expected {step}", repro=repro)
    if health(resumed) is not None:
        return None
    return CaseResult(case, "load step", Verdict.UNKNOWN, f"{silent}: nothing tells where it resumed; {REPORT_IT}",
                      repro=repro)


#: What a script adds when its saves' steps cannot be told from them.
NAME_THE_STEP = "wrap the save in `with ckpt_harness.saving(step):` (one line) so each save names its step"


def judge_saves_seen(case: str, golden: Run, marks_saves: str) -> Optional[CaseResult]:
    """ERROR when the golden run made no save the harness saw: nothing was
    checked, which is not a pass (a script that writes somewhere else, or
    through a writer nothing wraps). `marks_saves` says how the target's
    saves are seen (`Capabilities.marks_saves`)."""
    if any(rec["event"] == Kind.SAVED for r in golden.ranks for rec in r.records):
        return None
    elsewhere: dict[str, int] = {}
    for r in golden.ranks:
        for rec in r.records:
            for folder, n in rec.get("elsewhere", {}).items():
                elsewhere[folder] = elsewhere.get(folder, 0) + n
    wrote = ("; it wrote nothing there, but " + ", ".join(
        f"{n} file{'s' if n > 1 else ''} under {folder}" for folder, n in sorted(elsewhere.items())[:3])
        + " (its checkpoints? write them under the directory its command gets)") if elsewhere else ""
    return CaseResult(case, "saves", Verdict.ERROR,
                      f"the run made no save the harness could see, so nothing was checked: {marks_saves}{wrote}")


#: A Lightning callback's state key spells its settings (``ModelCheckpoint{'monitor': 'loss', ...}``).
_CALLBACK_STATE = re.compile(r"\{'[^{}]*\}")


def identity_note(run: Run) -> Optional[str]:
    """What `run`'s saves recorded that names the run rather than its training
    (`rankside.identity`: its checkpoint directory, times, process ids, host),
    compared without it: which keys, and why, for the report to say; None if none."""
    by_reason: dict[str, dict[str, None]] = {}
    for r in run.ranks:
        for rec in r.records:
            for key, why in rec.get("normalized", {}).items():
                by_reason.setdefault(why, {})[f"rank {r.rank} {_CALLBACK_STATE.sub('{…}', key)}"] = None
    if not by_reason:
        return None
    said = "; ".join(f"{why} in {len(keys)} key{'s' if len(keys) > 1 else ''} ({', '.join(list(keys)[:3])}"
                     f"{', ...' if len(keys) > 3 else ''})" for why, keys in sorted(by_reason.items()))
    return f"the run's identity, not its state, compared as a placeholder: {said}"


def judge_landed(case: str, run: Run, repro: Optional[str]) -> Optional[CaseResult]:
    """FAIL when a save that returned in the background (`dcp.async_save`)
    never finished writing before the run ended: the script tore down (its
    process group, its process) with the save in flight, or the save failed
    and nothing said so. Its checkpoint is not there to resume. None when
    every such save landed, or there was none."""
    lost: dict[int, set[int]] = {}  # step -> the ranks whose save of it never landed
    background = False
    for r in run.ranks:
        landed = {rec["step"] for rec in r.records if rec["event"] == Kind.LANDED}
        for rec in r.records:
            if rec["event"] == Kind.SAVED and rec.get("background"):
                background = True
                if rec["step"] not in landed:
                    lost.setdefault(rec["step"], set()).add(r.rank)
    if not background:
        return None
    if not lost:
        return CaseResult(case, "saves landed", Verdict.PASS,
                          "every save that returned in the background finished writing before the run ended")
    said = "; ".join(f"save {step} on rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, sorted(ranks)))}"
                     for step, ranks in sorted(lost.items()))
    return CaseResult(case, "saves landed", Verdict.FAIL,
                      f"{said} returned in the background and never finished writing: the run ended with it in "
                      f"flight (or it failed unseen), so its checkpoint is not there to resume; wait for the "
                      f"save's future (its result()) before tearing the process group down", repro=repro)


def judge_named_steps(case: str, golden: Run) -> Optional[CaseResult]:
    """UNKNOWN when the golden run saved, but no save had a step of its own:
    no resume can be matched to one."""
    counted = any(rec["event"] == Kind.SAVED for r in golden.ranks for rec in r.records)
    if save_steps(golden) or not counted:
        return None
    return CaseResult(case, "saves", Verdict.UNKNOWN,
                      f"the script saved, but no save's step could be told (no number in its path, no "
                      f"framework counter); {NAME_THE_STEP}")


def judge_stopped(case: str, stopped: Run, step: int, ranks: frozenset[int]) -> Optional[CaseResult]:
    """UNKNOWN when the run to preempt never got to stop after save `step`
    on every rank that made it in the golden run: it took another path."""
    missing = sorted(r.rank for r in stopped.ranks if r.rank in ranks and r.find(Kind.STOPPED, step) is None)
    if not missing:
        return None
    return CaseResult(case, "stopped", Verdict.UNKNOWN,
                      f"the run to stop after save {step} never stopped there on rank(s) "
                      f"{', '.join(map(str, missing))}: it did not save as the golden run did")


def judge_stopped_between(case: str, stopped: Run, at: int) -> Optional[CaseResult]:
    """UNKNOWN when the run to stop between saves, after optimizer step `at`,
    never stopped there on some rank: it made fewer steps than the golden run."""
    missing = sorted(r.rank for r in stopped.ranks if r.stopped_between != at)
    if not missing:
        return None
    return CaseResult(case, "stopped", Verdict.UNKNOWN,
                      f"the run to stop after step {at} (where optimizer step {at + 1} starts) never stopped there "
                      f"on rank(s) {', '.join(map(str, missing))}: it did not train as the golden run did")


def newest_complete(stopped: Run, savers: Mapping[int, frozenset[int]]) -> Optional[int]:
    """The newest save `stopped` had made when it stopped on every rank that
    makes it (`savers`, the golden run's), landed where it returned in the
    background: the checkpoint a resume must start from. None: no save was."""
    made = saves_by_step(stopped)
    for step in sorted(made, reverse=True):
        ranks = savers.get(step) or frozenset(made[step])
        if not ranks <= set(made[step]):
            continue
        if all(_landed(r, step) for r in stopped.ranks if r.rank in ranks):
            return step
    return None


def _landed(r, step: int) -> bool:
    """The rank's save of `step` returned and, if in the background, landed."""
    background = any(rec["event"] == Kind.SAVED and rec.get("step") == step and rec.get("background")
                     for rec in r.records)
    return not background or r.find(Kind.LANDED, step) is not None


def _lost(n: int) -> str:
    return f"{n} step{'s' if n != 1 else ''} lost"


def judge_stop_point(case: str, resumed: Run, at: int, newest: Optional[int], trained: Mapping[int, int],
                     repro: Optional[str], golden_steps: Sequence[int] = ()) -> Optional[CaseResult]:
    """"load step" of a run stopped between saves, after optimizer step `at`,
    when save `newest` was the newest complete one (None: none was): the
    resume must start from it, not an older one (a `latest` pointer some
    save did not refresh) nor scratch, nor a later one. Where it started is
    inferred from what it did (`infer_start`), the steps lost counted by
    `trained` (save step -> the optimizer steps made when it was made, the
    golden run's). None when nothing tells and the run failed (its live says why)."""
    inferred = infer_start(resumed, golden_steps)
    start, expected = inferred.step, newest or 0
    stopped = f"stopped after step {at}"

    def lost(step: int) -> int:
        return at - trained.get(step, step) if step else at

    def name(step: int) -> str:
        return f"save {step}" if step else "scratch"
    if start is None:
        if health(resumed) is not None:
            return None
        return CaseResult(case, "load step", Verdict.UNKNOWN,
                          f"{stopped}: {inferred.evidence}, so nothing tells where it resumed; {NAME_THE_STEP}",
                          repro=repro)
    if start == expected:
        return CaseResult(case, "load step", Verdict.PASS,
                          f"{stopped}, resumed from {name(start)}: {_lost(lost(start))} ({inferred.evidence})")
    if start < expected:
        return CaseResult(case, "load step", Verdict.FAIL,
                          f"{stopped}, the script resumed from {name(start)}, though save {expected} was complete "
                          f"when it stopped: {_lost(lost(start))}, not {lost(expected)} ({inferred.evidence})",
                          repro=repro)
    return CaseResult(case, "load step", Verdict.FAIL,
                      f"{stopped}, the script resumed from step {start}, after {name(expected)}, the newest "
                      f"checkpoint complete when it stopped ({inferred.evidence})", repro=repro)


def judge_overlap(case: str, stopped: Run, step: int) -> Optional[CaseResult]:
    """UNKNOWN when a run that held save `step`'s writers until training went
    on (`Stop.SLOW_WRITER`) had no writer start after an optimizer step: the
    save did not overlap training, so a checkpoint that holds the state the
    save was called with says nothing about its writer (each rank's STOPPED
    says what let its writers go: "training", "stop", "limit", or none started)."""
    held = {r.rank: (r.find(Kind.STOPPED, step) or {}).get("held") for r in stopped.ranks}
    started = {rank: why for rank, why in held.items() if why is not None}
    if any(why == "training" for why in started.values()):
        return None
    if not started:
        return CaseResult(case, "overlapped", Verdict.UNKNOWN, f"no rank handed save {step} to a writer that started "
                                                               "before the run stopped: nothing was in flight")
    shown = ", ".join(f"rank {rank}'s by {why}" for rank, why in sorted(started.items()))
    return CaseResult(case, "overlapped", Verdict.UNKNOWN,
                      f"no writer of save {step} started after an optimizer step (let go: {shown}): the run waited "
                      f"for it before it trained again, so nothing trained while save {step} was in flight")


def judge_deterministic(case: str, golden: Run, stopped: Run, step: int) -> Optional[CaseResult]:
    """UNKNOWN when two identical runs already differ at save `step`: nothing to judge against."""
    a, b = saves_by_step(golden).get(step), saves_by_step(stopped).get(step)
    if not a or not b:
        return None
    problems = diffs.by_rank(a, b)
    if not problems:
        return None
    return CaseResult(case, "deterministic", Verdict.UNKNOWN,
                      f"two identical runs differ at save {step}: {diffs.summary(problems)}; seed every source "
                      "of randomness (a Job's from ctx.seed) and make the data order a function of the step",
                      diffs.listing(problems))


def judge_resume_point(case: str, resumed: Run, step: int, repro: Optional[str],
                       golden_steps: Sequence[int] = ()) -> CaseResult:
    """"load step": the resumed run saved no step the checkpoint already held.
    One that did resumed from the save before the first it made again
    (`golden_steps`: those of the uninterrupted run), or from scratch."""
    steps = save_steps(resumed)
    again = [s for s in steps if s <= step]
    if again:
        start = start_before(again[0], golden_steps)
        where = "scratch" if start.fresh else f"an older checkpoint than the newest, step {start.step}'s"
        return CaseResult(case, "load step", Verdict.FAIL,
                          f"the script resumed from {where}: it saved step {again[0]} again, though the checkpoint "
                          f"directory held save {step}", repro=repro)
    if steps:
        return CaseResult(case, "load step", Verdict.PASS,
                          f"its first save after the resume was step {steps[0]}, after step {step}")
    return CaseResult(case, "load step", Verdict.PASS, f"it saved no step up to {step} again")


def judge_later_saves(case: str, golden: Run, resumed: Run, step: int, repro: Optional[str],
                      until: Optional[int] = None) -> Optional[CaseResult]:
    """"saves after resume": each save the golden run made after `step` (up
    to `until`, where the resumed run was stopped), made again by the same
    ranks, bitwise, and no other: a save of a step the golden run never
    saved is a FAIL naming it. None when neither run saved after `step`."""
    def after(saves: dict[int, dict[int, Record]]) -> dict[int, dict[int, Record]]:
        return {s: states for s, states in saves.items() if s > step and (until is None or s <= until)}
    expected, actual = after(saves_by_step(golden)), after(saves_by_step(resumed))
    if not expected and not actual:
        return None
    for s in sorted({*expected, *actual}):
        if s not in expected:
            made = ", ".join(map(str, sorted(expected))) or "none"
            return CaseResult(case, "saves after resume", Verdict.FAIL,
                              f"the resumed run made save {s}, which the uninterrupted run never made (its saves "
                              f"after step {step}: {made})", repro=repro)
        got = actual.get(s, {})
        missing = sorted(set(expected[s]) - set(got))
        if missing:
            return CaseResult(case, "saves after resume", Verdict.FAIL,
                              f"save {s} never returned on rank(s) {', '.join(map(str, missing))} after the "
                              f"resume (the uninterrupted run made it)", repro=repro)
        problems = diffs.by_rank(expected[s], got)
        if problems:
            return CaseResult(case, "saves after resume", Verdict.FAIL,
                              f"save {s} differs from the uninterrupted run's: {diffs.summary(problems)}",
                              diffs.listing(problems), repro, differences=diffs.rows(problems))
    listed = ", ".join(map(str, sorted(expected)))
    return CaseResult(case, "saves after resume", Verdict.PASS,
                      f"save{'s' if len(expected) > 1 else ''} {listed} bitwise equal on every rank that saved")
