"""Retention with keep-last N, judged on a fault-free run.

A rotation bug deletes nothing on the save that has it, it deletes the
wrong checkpoint: accelerate 0.16 sorted `checkpoint_10` before `checkpoint_8`
and from the eleventh save on kept 8, 9 and the newest. Only a look at the
directory after every save shows that, so with keep-last the golden run lists
the directory each time a save returns (and each time one is published: a
job that saves in the background rotates then, with the newest save still
in flight before it), and here every listing is held against what the saves
wrote.

Which entries are a save's own is read from the trace: the shallowest paths
under which that save, and no other, created anything. A directory every save
writes into (accelerate's `checkpoints/`, one per run) is descended through,
so `checkpoints/checkpoint_7` is save 8's own wherever it sits; a file every
save rewrites (a `latest` pointer) belongs to none. A checkpoint remains
complete if everything under its entries right after its own save is still
there.

A rotation may also keep one best checkpoint besides the newest (the HF
Trainer's `load_best_model_at_end` protects its `best_model_checkpoint`;
Lightning's `ModelCheckpoint` with a monitor): told so (`keeps_best`), a
listing may instead hold the newest N-1 (the newest one, for N = 1) and one
older checkpoint whole. Which is the best is the metric's business, not the
harness's: any one older checkpoint may stand in for the N-th newest, so a
rotation that deletes that one and keeps an old one instead passes then;
one that keeps too many, or drops one of the newest N-1, is still caught.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Optional

from ckpt_harness import phase
from ckpt_harness.records import Kind
from ckpt_harness.records.runs import Run
from ckpt_harness.verdict import CaseResult, Verdict


def judge_retention(case: str, run: Run, keep_last: int, repro: Optional[str], *,
                    background: bool = False, keeps_best: bool = False) -> CaseResult:
    """`background`: the target saves in the background and rotates as it
    publishes a save (`Kind.PUBLISHED`), so each listing is the one taken as a
    save was published, and only published saves count: one still in flight
    is neither kept nor missed. `keeps_best`: the rotation also keeps one best
    checkpoint (the module docstring)."""
    steps = run.saved_steps()
    own = own_roots({s: run.created_in(phase.save(s)) for s in steps})
    checkpoints = [s for s in steps if own[s]]
    if not checkpoints:
        return CaseResult(case, "retention", Verdict.UNKNOWN,
                          f"each of the {len(steps)} saves wrote only paths another save wrote too (a file every "
                          "save rewrites, or one directory they all fill), so no checkpoint can be told from "
                          "another and counted: keep-last is judged on a job that saves each step to a file or "
                          "directory of its own, at any depth under the checkpoint directory")
    kind, moments = (Kind.PUBLISHED, run.published_steps()) if background else (Kind.SAVED, steps)
    listings = {s: run.entries_after_save(s, kind) for s in moments}
    if not moments or any(listing is None for listing in listings.values()):
        return CaseResult(case, "retention", Verdict.UNKNOWN, "the directory was not listed after every "
                          + ("published save" if background else "save"))
    counted = [s for s in moments if s in own and own[s]]
    contents = {s: {e for e in listings[s] if _under(e, own[s])} for s in counted}
    wrong, bests = [], []
    unlike_a_best = False  # some wrong listing is not the newest N-1 and one older checkpoint
    for s in moments:
        made = [t for t in counted if t <= s]
        want = made[-keep_last:]
        whole = [t for t in made if contents[t] and contents[t] <= listings[s]]
        partial = [t for t in made if t not in whole and contents[t] & listings[s]]
        best = _kept_best(made, whole, keep_last)
        if whole == want and not partial:
            continue
        if keeps_best and best is not None and not partial:
            bests.append(best)
            continue
        unlike_a_best |= best is None or bool(partial)
        damaged = f", and what is left of {_steps(partial)} is incomplete" if partial else ""
        also = f", or the newest {max(1, keep_last - 1)} and one older kept as the best" if keeps_best else ""
        wrong.append(f"after save {s}{' was published' if background else ''}: {_steps(whole)} remain"
                     f"{damaged}; expected {_steps(want)}{also}")
    if wrong:
        hint = (" (each time the newest but one and an older checkpoint, as a rotation that also keeps its best "
                "checkpoint leaves them: if it keeps one, e.g. the Trainer's load_best_model_at_end, say so: "
                "--keeps-best for a script, Job.keeps_best for a job)") if not (unlike_a_best or keeps_best) else ""
        return CaseResult(case, "retention", Verdict.FAIL,
                          f"keep-last {keep_last} kept the wrong checkpoints: {wrong[0]}{hint}", "\n".join(wrong),
                          repro)
    kept = (f", or the newest {max(1, keep_last - 1)} and an older one kept as the best (step"
            f"{'s' if len(set(bests)) > 1 else ''} {', '.join(map(str, sorted(set(bests))))}, after {len(bests)} "
            "saves)" if bests else "")
    return CaseResult(case, "retention", Verdict.PASS,
                      f"after each of {len(moments)} {'published ' if background else ''}saves exactly the newest "
                      f"{min(keep_last, len(counted))} checkpoints remained{kept}")


def _kept_best(made: list[int], whole: list[int], keep_last: int) -> Optional[int]:
    """The one older checkpoint kept besides the newest N-1 (the newest, for
    N = 1), if that is what `whole` holds; else None."""
    recent = made[-max(1, keep_last - 1):]
    older = [t for t in whole if t not in recent]
    if len(older) == 1 and whole == sorted(older + recent) and older[0] < recent[0]:
        return older[0]
    return None


def own_roots(created: Mapping[int, Iterable[str]]) -> dict[int, set[str]]:
    """step -> the shallowest paths under which only that save created
    anything (the save's checkpoint, at whatever depth), from the paths each
    save created."""
    makers: dict[str, set[int]] = {}
    for step, paths in created.items():
        for path in paths:
            for prefix in _prefixes(path):
                makers.setdefault(prefix, set()).add(step)
    own: dict[int, set[str]] = {}
    for step, paths in created.items():
        roots = (next((q for q in _prefixes(p) if makers[q] == {step}), None) for p in paths)
        own[step] = {root for root in roots if root is not None}
    return own


def _prefixes(path: str) -> list[str]:
    parts = [part for part in path.split("/") if part not in ("", ".")]
    return ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _under(entry: str, roots: set[str]) -> bool:
    return any(entry == root or entry.startswith(root + "/") for root in roots)


def _steps(steps: list[int]) -> str:
    return "the checkpoints of steps " + ", ".join(map(str, steps)) if steps else "no checkpoint"
