"""Retention with keep-last N, judged on a fault-free run.

A rotation bug deletes nothing on the save that has it, it deletes the
wrong checkpoint: accelerate 0.16 sorted `checkpoint_10` before `checkpoint_8`
and from the eleventh save on kept 8, 9 and the newest. Only a look at the
directory after every save shows that, so with keep-last the golden run lists
the directory each time a save returns, and here every listing is held
against what the saves wrote.

Which entries are a save's own is read from the trace: the top-level files
and directories created in that save and in no other (a `latest` pointer is
rewritten by every save, so it belongs to none). A checkpoint remains
complete if everything under its entries right after its own save is still
there.
"""

from __future__ import annotations

from typing import Optional

from ckpt_harness import phase
from ckpt_harness.records import Run
from ckpt_harness.verdict import CaseResult, Verdict


def judge_retention(case: str, run: Run, keep_last: int, repro: Optional[str]) -> CaseResult:
    steps = run.saved_steps()
    tops = {s: {p.split("/")[0] for p in run.created_in(phase.save(s))} - {"", "."} for s in steps}
    shared = {t for s in steps for t in tops[s] if sum(t in tops[o] for o in steps) > 1}
    own = {s: tops[s] - shared for s in steps}
    checkpoints = [s for s in steps if own[s]]
    if not checkpoints:
        return CaseResult(case, "retention", Verdict.UNKNOWN, "no save created a file or directory of its own, so "
                          "there is no checkpoint to count; a job that rotates saves each step to its own directory")
    listings = {s: run.entries_after_save(s) for s in steps}
    if any(listing is None for listing in listings.values()):
        return CaseResult(case, "retention", Verdict.UNKNOWN, "the directory was not listed after every save")
    contents = {s: {e for e in listings[s] if e.split("/")[0] in own[s]} for s in checkpoints}
    wrong = []
    for s in steps:
        made = [t for t in checkpoints if t <= s]
        want = made[-keep_last:]
        whole = [t for t in made if contents[t] and contents[t] <= listings[s]]
        partial = [t for t in made if t not in whole and contents[t] & listings[s]]
        if whole != want or partial:
            damaged = f", and what is left of {_steps(partial)} is incomplete" if partial else ""
            wrong.append(f"after save {s}: {_steps(whole)} remain{damaged}; expected {_steps(want)}")
    if wrong:
        return CaseResult(case, "retention", Verdict.FAIL,
                          f"keep-last {keep_last} kept the wrong checkpoints: {wrong[0]}", "\n".join(wrong), repro)
    return CaseResult(case, "retention", Verdict.PASS, f"after each of {len(steps)} saves exactly the newest "
                                                       f"{min(keep_last, len(checkpoints))} checkpoints remained")


def _steps(steps: list[int]) -> str:
    return "the checkpoints of steps " + ", ".join(map(str, steps)) if steps else "no checkpoint"
