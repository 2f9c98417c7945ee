"""Judging runs: every verdict the harness gives is decided here, from records only.

For a resume after save k the reference is the state the stopped run had
right after save k returned (what is in that directory), not the golden
run's: if the two differ the job is not deterministic, which is reported as
such (UNKNOWN) instead of being blamed on the checkpoint.
"""

from __future__ import annotations

import dataclasses
import os
import signal
from typing import Optional

from ckpt_harness.records import RankRun, Run
from ckpt_harness.report import CaseResult, Verdict
from ckpt_harness.state import Record, diff

#: Differences listed per rank in details before "... and N more".
MAX_LISTED = 12


def health(run: Run) -> Optional[tuple[str, str]]:
    """(summary, details) of what went wrong in `run`, or None if every rank finished."""
    ranks = run.ranks
    if all(r.outcome.status == "ok" for r in ranks):
        return None
    if run.outcome.stuck_after_failure:
        head = "failure, and peers stuck after it"
    else:
        head = "hang" if run.outcome.timed_out else "failure"
    summary = f"{head}: " + "; ".join(f"rank {r.rank} {_rank_state(r)}" for r in ranks)
    details = []
    for r in ranks:
        o = r.outcome
        if o.stack is not None:
            details.append(f"rank {r.rank} stack when the run was stopped ({_rank_state(r)}):\n{_job_frames(o.stack)}")
        if o.status in ("failed", "crashed"):
            error = r.error
            tb = error["traceback"] if error else ""
            details.append(f"rank {r.rank} {_rank_state(r)}:\n{tb or o.log_tail()}")
        if o.status != "ok":
            details.append(f"rank {r.rank} log: {o.log}")
    return summary, "\n\n".join(details)


def _job_frames(stack: str) -> str:
    """A faulthandler dump without the launcher's own frames below the job."""
    noise = (f"{os.sep}ckpt_harness{os.sep}launch{os.sep}", "<frozen runpy>")
    return "\n".join(line for line in stack.splitlines() if not any(n in line for n in noise))


def _rank_state(r: RankRun) -> str:
    o = r.outcome
    if o.status == "hung":
        return r.where()
    if o.status == "failed":
        error = r.error
        if error is None:
            return "failed before the job started (see its log)"
        name = error["type"].rpartition(".")[2]
        return f"raised {name} in {error['phase']}: {error['message']}"
    if o.status == "crashed":
        how = f"signal {signal.Signals(o.signal).name}" if o.signal else f"exit code {o.exit_code}"
        return f"died ({how}) {r.where()}"
    if r.outcome.stack is not None:
        return "finished, waiting for its peers"
    return "finished"


def judge_live(case: str, run: Run, repro: Optional[str]) -> CaseResult:
    problem = health(run)
    if problem is None:
        return CaseResult(case, "live", Verdict.PASS, f"{run.name}: all ranks finished in {run.outcome.elapsed:.2f}s")
    summary, details = problem
    return CaseResult(case, "live", Verdict.FAIL, f"{run.name}: {summary}", details, repro)


def judge_fresh_start(case: str, run: Run, repro: Optional[str]) -> CaseResult:
    steps = run.loaded_steps()
    wrong = {r: s for r, s in steps.items() if s is not None}
    if len(steps) == len(run.ranks) and not wrong:
        return CaseResult(case, "fresh start", Verdict.PASS, "load() returned None on an empty directory")
    if wrong:
        return CaseResult(
            case, "fresh start", Verdict.FAIL,
            "load() on an empty checkpoint directory returned "
            + ", ".join(f"{s} on rank {r}" for r, s in sorted(wrong.items())),
            repro=repro,
        )
    return CaseResult(case, "fresh start", Verdict.FAIL, "the job never reported its load (ctx.loaded)", repro=repro)


def judge_deterministic(case: str, golden: Run, stopped: Run, step: int) -> Optional[CaseResult]:
    """UNKNOWN when two identical runs disagree at save `step`: nothing to judge against."""
    a, b = golden.states("saved", step), stopped.states("saved", step)
    if a is None or b is None:
        return None
    problems = _diff_ranks(a, b)
    if not problems:
        return None
    return CaseResult(
        case, "deterministic", Verdict.UNKNOWN,
        f"two identical runs differ at save {step}: {_first(problems)}; seed every source of randomness from ctx.seed",
        _list(problems),
    )


def undecided_if(nondeterminism: Optional[CaseResult], result: CaseResult) -> CaseResult:
    """A comparison with an uninterrupted run means nothing if two
    uninterrupted runs already differ: downgrade its failure to UNKNOWN."""
    if nondeterminism is None or result.verdict is not Verdict.FAIL:
        return result
    return dataclasses.replace(
        result, verdict=Verdict.UNKNOWN, summary=f"(job not deterministic) {result.summary}"
    )


def judge_load_step(case: str, resumed: Run, step: int, repro: Optional[str]) -> CaseResult:
    steps = resumed.loaded_steps()
    wrong = {r: s for r, s in steps.items() if s != step}
    if len(steps) == len(resumed.ranks) and not wrong:
        return CaseResult(case, "load step", Verdict.PASS, f"load() returned {step} on every rank")
    if not steps:
        return CaseResult(case, "load step", Verdict.FAIL, "the job never reported its load (ctx.loaded)", repro=repro)
    said = ", ".join(
        f"{'None (a silent fresh start)' if s is None else s} on rank {r}" for r, s in sorted(wrong.items())
    )
    return CaseResult(case, "load step", Verdict.FAIL, f"load() returned {said}; expected {step}", repro=repro)


def judge_same_state(
    case: str, check: str, expected: Optional[dict[int, Record]], actual: Optional[dict[int, Record]],
    what: str, repro: Optional[str],
) -> CaseResult:
    if expected is None or actual is None:
        return CaseResult(case, check, Verdict.FAIL, f"no {what} recorded on every rank", repro=repro)
    problems = _diff_ranks(expected, actual)
    if not problems:
        keys = len(next(iter(expected.values()), {}))
        return CaseResult(case, check, Verdict.PASS, f"bitwise equal on every rank ({keys} keys each)")
    return CaseResult(
        case, check, Verdict.FAIL, f"{what} differs: {_first(problems)}", _list(problems), repro
    )


def _diff_ranks(expected: dict[int, Record], actual: dict[int, Record]) -> list[tuple[int, list]]:
    out = []
    for rank in sorted(expected):
        differences = diff(expected[rank], actual.get(rank, {}))
        if differences:
            out.append((rank, differences))
    return out


def _first(problems: list[tuple[int, list]]) -> str:
    rank, differences = problems[0]
    keys = sorted({d.key for _, ds in problems for d in ds})
    more = f" (and {len(keys) - 1} more keys)" if len(keys) > 1 else ""
    return f"rank {rank} {differences[0]}{more}"


def _list(problems: list[tuple[int, list]]) -> str:
    lines = []
    for rank, differences in problems:
        lines.append(f"rank {rank}:")
        lines += [f"  {d}" for d in differences[:MAX_LISTED]]
        if len(differences) > MAX_LISTED:
            lines.append(f"  ... and {len(differences) - MAX_LISTED} more")
    return "\n".join(lines)
