"""Judging a script's resume: its saves after the resume against the golden run's.

A script does not report its load (there is no `ctx.loaded`), so a resume
after save k is judged by what it saves: every save the golden run made
after step k, per rank, bitwise, and its final state (its last save, see
`script_runner`). A resume that saves a step the checkpoint already held
started from scratch: a failure even when it ends equal to the golden run,
as a script that ignores its checkpoint always does.

Only saves whose step is known are matched by step; those numbered by a
count of saves (`inject.saves`) count as the final save only.
"""

from __future__ import annotations

from typing import Optional

from ckpt_harness.oracle import diffs
from ckpt_harness.oracle.judges import _diff_ranks
from ckpt_harness.records import Kind, Run
from ckpt_harness.state import Record
from ckpt_harness.verdict import CaseResult, Verdict

#: What a script adds when its saves' steps cannot be told from them.
NAME_THE_STEP = "wrap the save in `with ckpt_harness.saving(step):` (one line) so each save names its step"


def saves_by_step(run: Run) -> dict[int, dict[int, Record]]:
    """step -> rank -> what that rank saved at that step (all its saves of
    the step merged), for saves whose step is known."""
    out: dict[int, dict[int, Record]] = {}
    for r in run.ranks:
        for record in r.records:
            if record["event"] == Kind.SAVED and record.get("source") != "count":
                out.setdefault(record["step"], {}).setdefault(r.rank, {}).update(record["state"])
    return out


def judge_named_steps(case: str, golden: Run) -> Optional[CaseResult]:
    """UNKNOWN when the golden run saved, but no save had a step of its own:
    no resume can be matched to one."""
    counted = any(rec["event"] == Kind.SAVED for r in golden.ranks for rec in r.records)
    if save_steps(golden) or not counted:
        return None
    return CaseResult(case, "saves", Verdict.UNKNOWN,
                      f"the script saved, but no save's step could be told (no number in its path, no "
                      f"framework counter); {NAME_THE_STEP}")


def save_steps(run: Run) -> list[int]:
    """The steps a script run saved (any rank), in order."""
    return sorted(saves_by_step(run))


def savers(run: Run, step: int) -> frozenset[int]:
    """The ranks that took part in save `step`: those a preempted run waits for."""
    return frozenset(saves_by_step(run).get(step, {}))


def judge_stopped(case: str, stopped: Run, step: int, ranks: frozenset[int]) -> Optional[CaseResult]:
    """UNKNOWN when the run to preempt never got to stop after save `step`
    on every rank that made it in the golden run: it took another path."""
    missing = sorted(r.rank for r in stopped.ranks if r.rank in ranks and r.find(Kind.STOPPED, step) is None)
    if not missing:
        return None
    return CaseResult(case, "stopped", Verdict.UNKNOWN,
                      f"the run to stop after save {step} never stopped there on rank(s) "
                      f"{', '.join(map(str, missing))}: it did not save as the golden run did")


def judge_deterministic_saves(case: str, golden: Run, stopped: Run, step: int) -> Optional[CaseResult]:
    """UNKNOWN when two identical runs already differ at save `step`."""
    a, b = saves_by_step(golden).get(step), saves_by_step(stopped).get(step)
    if not a or not b:
        return None
    problems = _diff_ranks(a, b)
    if not problems:
        return None
    return CaseResult(case, "deterministic", Verdict.UNKNOWN,
                      f"two identical runs differ at save {step}: {diffs.summary(problems)}; seed every source "
                      "of randomness and make the data order a function of the step", diffs.listing(problems))


def judge_resume_point(case: str, resumed: Run, step: int, repro: Optional[str]) -> CaseResult:
    """"load step": the resumed run saved no step the checkpoint already held."""
    steps = save_steps(resumed)
    again = [s for s in steps if s <= step]
    if again:
        return CaseResult(case, "load step", Verdict.FAIL,
                          f"the script resumed from scratch: it saved step {again[0]} again, though the "
                          f"checkpoint directory held save {step}", repro=repro)
    if steps:
        return CaseResult(case, "load step", Verdict.PASS,
                          f"its first save after the resume was step {steps[0]}, after step {step}")
    return CaseResult(case, "load step", Verdict.PASS, f"it saved no step up to {step} again")


def judge_later_saves(case: str, golden: Run, resumed: Run, step: int, repro: Optional[str]) -> Optional[CaseResult]:
    """"saves after resume": each save the golden run made after `step`,
    made again by the same ranks, bitwise; None when there was none."""
    expected = {s: states for s, states in saves_by_step(golden).items() if s > step}
    if not expected:
        return None
    actual = saves_by_step(resumed)
    for s in sorted(expected):
        got = actual.get(s, {})
        missing = sorted(set(expected[s]) - set(got))
        if missing:
            return CaseResult(case, "saves after resume", Verdict.FAIL,
                              f"save {s} never returned on rank(s) {', '.join(map(str, missing))} after the "
                              f"resume (the uninterrupted run made it)", repro=repro)
        problems = _diff_ranks(expected[s], got)
        if problems:
            return CaseResult(case, "saves after resume", Verdict.FAIL,
                              f"save {s} differs from the uninterrupted run's: {diffs.summary(problems)}",
                              diffs.listing(problems), repro)
    listed = ", ".join(map(str, sorted(expected)))
    return CaseResult(case, "saves after resume", Verdict.PASS,
                      f"save{'s' if len(expected) > 1 else ''} {listed} bitwise equal on every rank that saved")
