"""Differences judged by their consequence (issue 64, item 6).

A resumed run's state can differ from an uninterrupted run's in what its
data loader keeps about itself while the batches it yields, the weights and
the optimizer stay bitwise the same: a count of how often it was loaded, a
field nothing reads back. Judged by its keys alone, that is as bad as a
loader that replays its data. So a resume whose every failure is a data
position difference is tested by what the difference causes: the harness
resumes once more, from a save a resumed run wrote (the one carrying the
difference), and compares what training does from there. If anything but
data position diverges (weights, optimizer, counters, RNG), or the run
fails, the difference has a consequence: FAIL, saying so. If training goes
on bitwise, the difference is bookkeeping: the failures become passes that
name the keys, and the report notes them.

Only data position is tried this way: a difference in the model, the
optimizer, a counter or an RNG state changes training by itself, and a
missing key is a missing key.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Mapping, Optional, Sequence

from ckpt_harness.oracle import diffs
from ckpt_harness.oracle.severity import Severity, severity
from ckpt_harness.state import Record
from ckpt_harness.verdict import CaseResult, Verdict

#: Keys a note names before "(+N more)".
NAMED = 3


def bookkeeping(results: Sequence[CaseResult]) -> Optional[tuple[str, ...]]:
    """The keys behind `results`' failures when every failure is a state
    comparison whose every difference is in data position; None when there
    is no failure or any failure is of another kind. The keys lose the save
    file they were found in ("step_4.pt.loader.resumes" -> "loader.resumes")."""
    failed = [r for r in results if r.verdict is Verdict.FAIL]
    if not failed or not all(r.differences and all(_data_only(d) for d in r.differences) for r in failed):
        return None
    keys = {_within_save(d.key) for r in failed for d in r.differences}
    return tuple(sorted(keys))


def consequences(expected: Mapping[int, Record], actual: Mapping[int, Record]) -> list[tuple[int, list]]:
    """Each rank's differences of `actual` from `expected` but data position's."""
    found = [(rank, [d for d in ds if not _data_only(d)]) for rank, ds in diffs.by_rank(expected, actual)]
    return [(rank, ds) for rank, ds in found if ds]


@dataclasses.dataclass(frozen=True)
class Consequence:
    """What resuming once more showed: `diverged` None when training went
    on bitwise from save `again` (written by a run resumed from save
    `first`), else what diverged, as a report says it."""

    first: int
    again: int
    diverged: Optional[str] = None
    details: str = ""

    @property
    def how(self) -> str:
        return f"resumed once more, from save {self.again} as a run resumed from save {self.first} wrote it"


def judge(results: Sequence[CaseResult], keys: Sequence[str], found: Optional[Consequence],
          untold: str = "") -> list[CaseResult]:
    """`results` of a resume whose failures are data position `keys` alone
    (`bookkeeping`), judged by `found`: FAIL where training diverged, PASS
    with the keys named where it did not; UNKNOWN where nothing could resume
    once more (`found` None, `untold` why)."""
    named = ", ".join(keys[:NAMED]) + (f" (+{len(keys) - NAMED} more)" if len(keys) > NAMED else "")
    out = []
    for r in results:
        if r.verdict is not Verdict.FAIL:
            out.append(r)
        elif found is None:
            out.append(dataclasses.replace(r, verdict=Verdict.UNKNOWN, summary=(
                f"{r.summary}; whether that data position difference changes training is not known: {untold}")))
        elif found.diverged is not None:
            out.append(dataclasses.replace(r, summary=f"{r.summary}; it changes training: {found.how}, "
                                                      f"{found.diverged}",
                                           details=f"{r.details}\n{found.details}".strip()))
        else:
            out.append(dataclasses.replace(r, verdict=Verdict.PASS, summary=(
                f"differs only in data position bookkeeping ({named}), noted: {found.how}, training went on "
                f"bitwise"), details=f"{r.details}\n(noted, not a failure: {r.summary})".strip(), differences=(),
                note=(
                f"a resumed run's state differs from the uninterrupted run's in data position bookkeeping alone "
                f"({', '.join(keys)}): {found.how}, training went on bitwise, so it is noted, not failed")))
    return out


def _data_only(d) -> bool:
    return severity([d]) is Severity.DATA


def _within_save(key: str) -> str:
    """The key without the save file a script's state names first, so that
    one key of every save is named once ("step_4.pt.tmp.loader.resumes" ->
    "loader.resumes"); a Job's keys are its state's already."""
    return _SAVE_FILE.sub("", key, count=1)


#: What a script's key starts with: "last save." for its final state, then the file the state went to (a
#: checkpoint's suffix, and a temporary name's after it).
_SAVE_FILE = re.compile(r"^(last save\.)?[^/]*?\.(pt|pth|ckpt|bin|pkl|npz|npy|json|safetensors)"
                        r"(\.(tmp|temp|partial|part|new)[\w-]*)?\.")


__all__ = ["Consequence", "bookkeeping", "consequences", "judge"]
