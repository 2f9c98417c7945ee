"""Judging a conversion of save k: the converted checkpoint, read back, against the state at save k.

What a conversion is documented to leave out is taken out of the expected
state (a weights-only export holds no optimizer), but a key it keeps anyway
is compared like any other: a documented loss is not a failure, an
undocumented one is, and every difference is named (key, dtype, shape,
first differing index, max abs diff). A refusal is allowed: a conversion
that says it cannot convert this checkpoint has lost nothing.
"""

from __future__ import annotations

import fnmatch
import re
from typing import Optional, Sequence

from ckpt_harness.conversions.run import Converted
from ckpt_harness.oracle import diffs
from ckpt_harness.oracle.scenarios import judge_full_resume
from ckpt_harness.records.runs import Run
from ckpt_harness.state import Difference, Record, diff
from ckpt_harness.verdict import CaseResult, Verdict


def judge_conversion(case: str, check: str, step: int, expected: Optional[Record], converted: Converted, *,
                     writes: str, drops: Sequence[str], why_dropped: str, repro: Optional[str]) -> CaseResult:
    """`expected`: the state at save `step` (a job's full state, or the save
    read by its own layout's loader); None only when the conversion gave
    nothing to compare with it."""
    def result(verdict: Verdict, summary: str, details: str = "", **kw) -> CaseResult:
        return CaseResult(case, check, verdict, summary, details,
                          repro if verdict is not Verdict.PASS else None, **kw)

    if converted.error is not None:
        return result(Verdict.ERROR, f"the conversion never ran: {converted.error}", converted.details)
    if converted.refused is not None:
        return result(Verdict.PASS, f"refused save {step}, converting nothing: {converted.refused}",
                      converted.details)
    if converted.broken is not None:
        return result(Verdict.FAIL, converted.broken, converted.details)
    if converted.no_reader is not None:
        return result(Verdict.NA, f"converted, but not judged: {converted.no_reader}")
    if converted.unreadable is not None:
        return result(Verdict.FAIL, f"wrote {writes}, which does not load: {converted.unreadable}",
                      converted.details)
    actual = converted.state
    assert actual is not None and expected is not None
    documented = [k for k in expected if k not in actual and any(fnmatch.fnmatchcase(k, p) for p in drops)]
    kept = {k: v for k, v in expected.items() if k not in documented}
    differences = diff(kept, actual)
    if differences:
        lines = diffs.fold_keys(differences)
        more = len(differences) - len(lines[0].keys)
        retyped = _retyped(differences)
        return result(Verdict.FAIL, f"the converted checkpoint is not save {step}: "
                                    + (retyped or lines[0].text + (f" (and {more} more keys)" if more else "")),
                      "\n".join(line.text for line in lines[:diffs.MAX_LISTED]),
                      differences=diffs.rows([(0, differences)]))
    dropped = f"; {len(documented)} keys left out as documented ({why_dropped})" if documented else ""
    return result(Verdict.PASS, f"{len(kept)} keys bitwise equal to save {step}{dropped}")


#: A path segment of a key that is not a string, as `conversions._layouts.plain` writes it: "int:0".
_TYPED = re.compile(r"(?<![^/])\w+:([^/]+)")


def _retyped(differences: Sequence[Difference]) -> Optional[str]:
    """Keys that only changed type (int 0 saved, "0" read back): said as such,
    since a loader that looks them up by the saved type finds nothing."""
    missing = [d.key for d in differences if d.kind == "missing"]
    unexpected = {_TYPED.sub(r"\1", d.key): d.key for d in differences if d.kind == "unexpected"}
    pairs = [(key, unexpected[_TYPED.sub(r"\1", key)]) for key in missing if _TYPED.sub(r"\1", key) in unexpected
             and unexpected[_TYPED.sub(r"\1", key)] != key]
    if not pairs:
        return None
    saved, read = pairs[0]
    more = f" (and {len(pairs) - 1} more)" if len(pairs) > 1 else ""
    return (f"{len(pairs)} keys changed type: saved as {saved}, read back as {read}{more}; a loader that looks them "
            "up as saved finds nothing")


def judge_converted_resume(case: str, check: str, step: int, expected: Record, resumed: Run, *, noun: str,
                           repro: Optional[str]) -> CaseResult:
    """A round trip put where save `step` was, resumed by the job's own
    loader: the full state after load bitwise that of the save, then the run
    trains to its end (as a world-size change is judged)."""
    return judge_full_resume(case, check, expected, resumed, step,
                             label=f"the {noun}'s resume from the converted save {step}",
                             what=f"full state after loading the converted save {step}",
                             passed=f"the {noun}'s own loader resumed it", repro=repro)
