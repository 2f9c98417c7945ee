"""Verdicts, the result of one case, and how verdicts fold into one.

One vocabulary from the oracle up to the matrix: a case, a scenario and a
matrix cell each get a `Verdict`, and every fold (a scenario from its cases,
a cell from its scenarios) uses `fold`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Iterable, Optional


class Verdict(str, enum.Enum):
    #: The property held.
    PASS = "pass"
    #: The checkpointing under test broke the property; nothing else is a FAIL.
    FAIL = "fail"
    #: The harness ran the case but cannot decide it (e.g. the job is not deterministic).
    UNKNOWN = "unknown"
    #: The harness itself failed on this case (a group it could not start, a
    #: state its models do not cover): no statement about the job.
    ERROR = "error"
    #: The check does not apply to this job (e.g. world-size change without `full_state`).
    NA = "n/a"

    @property
    def judged(self) -> bool:
        """A statement about the job was made (pass, fail or n/a)."""
        return self in (Verdict.PASS, Verdict.FAIL, Verdict.NA)

    @property
    def ok(self) -> bool:
        return self in (Verdict.PASS, Verdict.NA)

    @property
    def mark(self) -> str:
        return _MARKS[self]


_MARKS = {Verdict.PASS: "✅ pass", Verdict.FAIL: "❌ fail", Verdict.UNKNOWN: "❔ unknown",
          Verdict.ERROR: "⚠️ error", Verdict.NA: "➖ n/a"}

#: Which verdict a fold takes when its parts disagree: a failure anywhere
#: fails the whole; then a part the harness could not run, then one it could
#: not decide; n/a only if every part is.
PRECEDENCE = (Verdict.FAIL, Verdict.ERROR, Verdict.UNKNOWN, Verdict.PASS, Verdict.NA)


def fold(verdicts: Iterable[Verdict]) -> Verdict:
    """The verdict of a whole from its parts' (n/a for no parts)."""
    present = set(verdicts)
    return next((v for v in PRECEDENCE if v in present), Verdict.NA)


@dataclasses.dataclass(frozen=True)
class CaseResult:
    """One judgement of one case, as the oracle gives it."""

    case: str
    #: The property or check judged ("atomic", "live", "state after load").
    check: str
    verdict: Verdict
    #: One line for the table.
    summary: str = ""
    #: Everything needed to understand a failure: diffs, stacks, log tails.
    details: str = ""
    repro: Optional[str] = None
    #: Row of an exploration table (see `report.EXPLORE_COLUMNS`).
    cells: tuple[str, ...] = ()
    #: The case whose resume this one was judged against: both left the same
    #: checkpoint directory (`resumes`).
    shares: Optional[str] = None

    def explain(self) -> str:
        block = [f"--- {self.case} / {self.check}: {self.verdict.value.upper()} — {self.summary}"]
        if self.details:
            block.append(self.details.rstrip())
        if self.repro:
            block.append(f"repro: {self.repro}")
        return "\n".join(block)
