"""Why a case failed, in the terms a regression must be told apart by.

A baseline that matches a case by its verdict alone lets a worse failure
through: a release whose mid-epoch resume loses one RNG value and an older
one whose resume diverges in every weight both FAIL `faithful`, and a CI gate
that knew the first passed the second. A *cause* is what stays the same when
the same bug fails again and changes when another one does:

- the property the case broke (`check`);
- what its resume gave (`outcome`: S_prev, refused, garbage...), for the
  judgment of a fault case under its own property, where that is the
  failure; not for `live` or `faithful` riding on it (a run that ends
  differently is the same bug whichever checkpoint it resumed, and which
  one it resumed can race between runs: a power loss as one rank enters a
  collective), nor for a check that has no resume;
- which kinds of state differ, and how (`differs`: "rng values",
  "optimizer missing"), from the keys of the state comparison.

Paths, ranks, steps, key counts and timings do not count: the same bug gives
the same cause on every run, machine and release. A cause is recorded (a
baseline, matrix.json) as its text, and compared whole.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Optional

from ckpt_harness.oracle.properties import SIDE_PROPERTIES
from ckpt_harness.oracle.severity import Severity, kind_of_key, severity
from ckpt_harness.verdict import CaseResult, Verdict

@dataclasses.dataclass(frozen=True, order=True)
class Cause:
    """Why one judgment of a case failed (see the module's docstring)."""

    check: str
    outcome: str = ""
    #: "<kind of state> <how it differs>", sorted, each once ("model values", "rng missing").
    differs: tuple[str, ...] = ()

    def __str__(self) -> str:
        return " · ".join([self.check, *([self.outcome] if self.outcome else []),
                           *([", ".join(self.differs)] if self.differs else [])])


_HOW = {"missing": "missing", "unexpected": "unexpected", "dtype": "dtype", "shape": "shape", "values": "values"}


def cause_of(result: CaseResult) -> Cause:
    """The cause of one judgment (any verdict; meaningful for one that did not pass)."""
    differs = sorted({f"{kind_of_key(d.key)} {_HOW.get(d.kind, d.kind)}" for d in result.differences})
    outcome = result.outcome if result.outcome and result.check not in SIDE_PROPERTIES else ""
    return Cause(result.check, outcome, tuple(differs))


def causes_of(results: Iterable[CaseResult], verdict: Optional[Verdict] = None) -> frozenset[str]:
    """The causes (as text) of every judgment of `results` (its riding ones
    too) with `verdict`, or, without one, of every judgment that did not pass."""
    return frozenset(str(cause_of(j)) for r in results for j in r.judgments()
                     if (j.verdict is verdict if verdict is not None else not j.verdict.ok))


def severity_of(judgments: Iterable[CaseResult]) -> Optional[Severity]:
    """The worst severity of the failing `judgments` (each alone, not what
    rides on it), all of which compared states; None when one failed
    otherwise (a hang, a refused load, a torn file: not a matter of degree)
    or none failed."""
    worst: Optional[Severity] = None
    for j in (j for j in judgments if j.verdict is Verdict.FAIL):
        found = severity(j.differences)
        if found is None:
            return None
        worst = found if worst is None else max(worst, found)
    return worst
