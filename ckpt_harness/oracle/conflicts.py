"""single-writer: no two ranks write, rename or delete the same path in one save.

Judged on a run's trace, whatever else the run did, so a save that passes
every resume is still flagged: two ranks racing on one path is a race that
a local disk and a small checkpoint win almost every time. On a shared file
system it is the report that costs days: every node's local rank 0 renaming
the staging directory into place ("No such file", LLaMA-Factory), every
rank calling `tokenizer.save_pretrained()` into one directory (32 ranks hung
35 hours on NFS, NVIDIA-NeMo/RL PR #3504), every rank's checkpoint process
writing the one model file (DeepSpeed's decoupled engine).

A save here is what its phases cover: the save's own ("save 4"), its
writers' ("bg_save 4"), and what the job does right after it returned
("after_save 4": rotation deletes old checkpoints there). What counts on a
path: an open for write (the probes record no other open), a rename from or
onto it, an unlink, rmdir or rmtree of it. Not a `mkdir`: every rank making
the directory it writes its own shard into (`exist_ok`) is the norm, and
harmless. A rank's checkpoint process acts as its rank.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from ckpt_harness import phase
from ckpt_harness.inject.trace import OUTSIDE, Event, EventKind
from ckpt_harness.records.runs import Run
from ckpt_harness.verdict import CaseResult, Verdict

CHECK = "single-writer"

#: What each operation that claims a path does to it, in words.
_DOES = {EventKind.OPEN: "writes it", EventKind.UNLINK: "deletes it", EventKind.RMDIR: "deletes it",
         EventKind.RMTREE: "deletes it"}


@dataclasses.dataclass(frozen=True)
class Claim:
    """One rank's operation on a path in a save."""

    rank: int
    does: str
    caller: str

    def __str__(self) -> str:
        return f"rank {self.rank} {self.does}" + (f" at {self.caller}" if self.caller else "")


@dataclasses.dataclass(frozen=True)
class Conflict:
    """A path more than one rank claimed in the save of `step`."""

    step: int
    path: str
    claims: tuple[Claim, ...]

    @property
    def ranks(self) -> tuple[int, ...]:
        return tuple(sorted({c.rank for c in self.claims}))

    def __str__(self) -> str:
        shown = "; ".join(str(c) for c in self.claims)
        return f"save {self.step}: {self.path} by ranks {', '.join(map(str, self.ranks))} ({shown})"


def _save_of(name: str) -> Optional[int]:
    """The save a phase belongs to: its own, its writers', what follows it."""
    name = phase.foreground(name)
    step = phase.step_of(name, "save")
    return step if step is not None else phase.step_of(name, "after_save")


def _claims(e: Event) -> list[tuple[str, str]]:
    """(path, what the operation does to it) for each path `e` claims."""
    f = e.fields
    if e.kind is EventKind.RENAME:
        moved = [(f.get("src") or f.get("src_outside"), "renames it away"),
                 (f.get("dst") or f.get("dst_outside"), "renames onto it")]
        return [(p, does) for p, does in moved if p]
    does = _DOES.get(e.kind)
    if does is None:
        return []
    path = f.get("outside") if f.get("path") == OUTSIDE else f.get("path")
    return [(path, does)] if path else []


def conflicts(run: Run) -> list[Conflict]:
    """Every path more than one rank claimed within one save, in save and path order."""
    claimed: dict[tuple[int, str], dict[int, Claim]] = {}
    for r in run.ranks:
        for e in r.events:
            step = _save_of(e.phase)
            if step is None:
                continue
            for path, does in _claims(e):
                claimed.setdefault((step, path), {}).setdefault(r.rank, Claim(r.rank, does, e.caller))
    return [Conflict(step, path, tuple(by_rank[rank] for rank in sorted(by_rank)))
            for (step, path), by_rank in sorted(claimed.items()) if len(by_rank) > 1]


def judge_single_writer(case: str, run: Run, repro: Optional[str]) -> CaseResult:
    """single-writer on `run`: FAIL naming each path, its ranks and their lines."""
    found = conflicts(run)
    if not found:
        saves = len({_save_of(e.phase) for r in run.ranks for e in r.events} - {None})
        return CaseResult(case, CHECK, Verdict.PASS, f"every path of its {saves} save(s) was written, renamed or "
                                                      "deleted by one rank at most")
    first = found[0]
    more = f" (and {len(found) - 1} more path(s))" if len(found) > 1 else ""
    return CaseResult(
        case, CHECK, Verdict.FAIL,
        f"{first}{more}: ranks racing on one path tear or lose it on a shared file system, however often a local "
        "disk lets it pass; let one rank do it (rank 0, or each node's local rank 0 only on node-local disks)",
        "\n".join(str(c) for c in found), repro)
