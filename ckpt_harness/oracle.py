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
    lines = [line for line in stack.splitlines() if not any(n in line for n in noise)]
    if not any(line.lstrip().startswith("File ") for line in lines):
        return "(only the harness's own frames: the rank is parked until the group is torn down)"
    return "\n".join(lines)


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


# -- after a fault: what did the resume give, and which property does that break --
@dataclasses.dataclass(frozen=True)
class Outcome:
    """What a resume produced, in the oracle's vocabulary."""

    #: "S_k", "S_prev", "older", "refused", "fresh start", "mixed", "partial",
    #: "garbage", "hang", "error on some ranks", "no load"
    kind: str
    step: Optional[int] = None
    detail: str = ""

    def __str__(self) -> str:
        text = self.kind if self.step is None or self.kind in ("refused", "hang") else f"{self.kind} (step {self.step})"
        return f"{text}: {self.detail}" if self.detail else text


def classify_resume(resumed: Run, saved: dict[int, dict[int, Record]], k: int, prev: Optional[int]) -> Outcome:
    """Name what the resume loaded, comparing each rank's state after load
    with every state the job ever saved (`saved`: step -> rank -> record)."""
    loaded = resumed.states("loaded")
    if loaded is None:
        return _failure_outcome(resumed)
    steps = resumed.loaded_steps()
    claimed = steps.get(0)
    if any(s != claimed for s in steps.values()):
        return Outcome("mixed", None, f"ranks resumed from different steps: {steps}")
    if claimed is None:
        return Outcome("fresh start", None, "load() returned None although a checkpoint was saved")
    origin: dict[str, set[int]] = {}
    for rank, record in loaded.items():
        for key, leaf in record.items():
            origin[f"{rank}:{key}"] = {s for s, states in saved.items() if states.get(rank, {}).get(key) == leaf}
    if all(claimed in sources for sources in origin.values()) and _same_keys(loaded, saved.get(claimed)):
        kind = "S_k" if claimed == k else "S_prev" if claimed == prev else "older"
        return Outcome(kind, claimed)
    unmatched = sorted(key for key, sources in origin.items() if claimed not in sources)
    other_steps = {s for key in unmatched for s in origin[key]}
    if unmatched and all(origin[key] for key in unmatched) and other_steps:
        return Outcome("mixed", claimed, f"{_keys(unmatched)} come from step(s) {sorted(other_steps)}")
    if any(claimed in sources for sources in origin.values()):
        return Outcome("partial", claimed, f"{_keys(unmatched)} not restored")
    return Outcome("garbage", claimed, "the state after load matches no saved state")


def _same_keys(loaded: dict[int, Record], expected: Optional[dict[int, Record]]) -> bool:
    return expected is not None and all(loaded[r].keys() == expected.get(r, {}).keys() for r in loaded)


def _keys(keys: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"rank {k.replace(':', ' ', 1)}" for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _failure_outcome(run: Run) -> Outcome:
    o = run.outcome
    if o.timed_out and not o.stuck_after_failure:
        return Outcome("hang", None, health(run)[0] if health(run) else "")
    errors = [r for r in run.ranks if r.outcome.status in ("failed", "crashed")]
    if errors and len(errors) == len(run.ranks):
        named = all(_names_a_file_or_rank(r) for r in errors)
        first = errors[0].error
        message = f"{first['type'].rpartition('.')[2]}: {first['message']}" if first else "died"
        return Outcome("refused" if named else "refused without naming a file or rank", None, _one(message))
    if errors:
        return Outcome("error on some ranks", None, health(run)[0] if health(run) else "")
    return Outcome("no load", None, "the job never reported its load")


def _names_a_file_or_rank(r: RankRun) -> bool:
    error = r.error
    if error is None:
        return False
    text = f"{error['message']}\n{error['traceback'].strip().splitlines()[-1] if error['traceback'] else ''}"
    return "rank" in text.lower() or "/" in text or "." in error["message"]


def _one(text: str, limit: int = 200) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: property -> (fault kinds it judges, resume outcomes it accepts)
PROPERTIES = {
    "atomic": "a crash at any point of a save resumes the new checkpoint or the previous one",
    "durable": "power loss after a save returned still resumes that save",
    "preserving": "a failed save never destroys the previous checkpoint",
    "live": "no hang; an error on one rank becomes an error on every rank",
    "detecting": "a corrupt or missing file is refused or skipped, never loaded silently",
    "faithful": "after an accepted resume the run ends bitwise equal to the uninterrupted run",
    "skew-safe": "a delay alone never changes the result",
    "overwrite-safe": "saving into an existing step directory replaces it with no stale file, or refuses untouched",
    "rotation-safe": "keep-last-N rotation always leaves a complete checkpoint, and the newest is resumed",
    "reshardable": "a checkpoint saved at N ranks resumes at M ranks with the full state bitwise equal",
}


def property_for(kind: str) -> str:
    if kind in ("crash", "crash-after", "crash-mid", "hang", "power-loss"):
        return "atomic"
    if kind in ("error", "eio", "enospc"):
        return "preserving"
    if kind == "delay":
        return "skew-safe"
    if kind == "power-loss-after":
        return "durable"
    return "detecting"  # torn writes and corruption


def expected(prop: str, save_returned: bool, has_prev: bool) -> str:
    """What `accepted` allows, in words for a failure message."""
    previous = "S_prev" if has_prev else "a fresh start (no earlier checkpoint)"
    if prop in ("durable", "skew-safe"):
        return "S_k"
    if prop == "detecting":
        return f"a refusal on every rank naming the file or rank, {previous}, or S_k intact"
    if save_returned:
        return "S_k (the save had returned on every rank)"
    return f"S_k or {previous}"


def accepted(prop: str, outcome: Outcome, save_returned: bool, has_prev: bool) -> bool:
    """Is this resume outcome allowed under `prop`? Without a previous
    checkpoint, a fresh start is what "the previous one" means."""
    previous = ("S_prev",) if has_prev else ("fresh start",)
    if prop in ("durable", "skew-safe") or (save_returned and prop != "detecting"):
        return outcome.kind == "S_k"
    if prop in ("atomic", "preserving"):
        return outcome.kind in ("S_k", *previous)
    if prop == "detecting":
        return outcome.kind in ("S_k", "refused", *previous)
    raise ValueError(prop)
