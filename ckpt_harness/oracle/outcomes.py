"""What a resume after a fault produced, in the oracle's vocabulary."""

from __future__ import annotations

import dataclasses
import enum
import re
from typing import Mapping, Optional

from ckpt_harness.oracle.problems import health
from ckpt_harness.oracle.start import REPORT_IT, infer_start
from ckpt_harness.records import Kind
from ckpt_harness.records.runs import RankRun, Run
from ckpt_harness.state import Record


class OutcomeKind(str, enum.Enum):
    #: Bitwise the state of the broken save k.
    S_K = "S_k"
    #: Bitwise the state of the save before it.
    S_PREV = "S_prev"
    #: Bitwise an even older save.
    OLDER = "older"
    #: Every rank raised, naming the file or rank at fault.
    REFUSED = "refused"
    REFUSED_UNNAMED = "refused without naming a file or rank"
    #: `load()` returned None although a checkpoint was saved.
    FRESH = "fresh start"
    #: Keys (or ranks) from different saves.
    MIXED = "mixed"
    #: Some keys silently not restored.
    PARTIAL = "partial"
    #: Matches no saved state.
    GARBAGE = "garbage"
    HANG = "hang"
    SOME_ERRORS = "error on some ranks"
    NO_LOAD = "no load"

    @property
    def resumed(self) -> bool:
        """A state the job may go on training from."""
        return self in (OutcomeKind.S_K, OutcomeKind.S_PREV, OutcomeKind.OLDER, OutcomeKind.FRESH)


@dataclasses.dataclass(frozen=True)
class Outcome:
    kind: OutcomeKind
    step: Optional[int] = None
    detail: str = ""

    def __str__(self) -> str:
        quiet = self.step is None or self.kind in (OutcomeKind.REFUSED, OutcomeKind.HANG)
        text = self.kind.value if quiet else f"{self.kind.value} (step {self.step})"
        return f"{text}: {self.detail}" if self.detail else text


def classify_resume(resumed: Run, saved: Mapping[int, Mapping[int, Record]], k: int, prev: Optional[int], *,
                    ends_group: bool = True) -> Outcome:
    """Name what the resume loaded, comparing each rank's state after load
    with every state the job ever saved (`saved`: step -> rank -> record).
    `ends_group`: a rank whose error ended it ends its group (`failure_outcome`)."""
    loaded = resumed.states(Kind.LOADED)
    if loaded is None:
        outcome = failure_outcome(resumed, ends_group=ends_group)
        if outcome.kind is OutcomeKind.NO_LOAD and not resumed.loaded_steps():
            return unreported_outcome(resumed, saved, k, prev)
        return outcome
    steps = resumed.loaded_steps()
    claimed = steps.get(0)
    if any(s != claimed for s in steps.values()):
        return Outcome(OutcomeKind.MIXED, None, f"ranks resumed from different steps: {steps}")
    if claimed is None:
        return Outcome(OutcomeKind.FRESH, None, "load() returned None although a checkpoint was saved")
    origin: dict[str, set[int]] = {}
    for rank, record in loaded.items():
        for key, leaf in record.items():
            origin[f"{rank}:{key}"] = {s for s, states in saved.items() if states.get(rank, {}).get(key) == leaf}
    if all(claimed in sources for sources in origin.values()) and _same_keys(loaded, saved.get(claimed)):
        kind = OutcomeKind.S_K if claimed == k else OutcomeKind.S_PREV if claimed == prev else OutcomeKind.OLDER
        return Outcome(kind, claimed)
    unmatched = sorted(key for key, sources in origin.items() if claimed not in sources)
    missing = sorted(f"{rank}:{key}" for rank, record in (saved.get(claimed) or {}).items()
                     for key in record if key not in loaded.get(rank, {}))
    other_steps = {s for key in unmatched for s in origin[key]}
    if unmatched and all(origin[key] for key in unmatched) and other_steps:
        return Outcome(OutcomeKind.MIXED, claimed, f"{_keys(unmatched)} come from step(s) {sorted(other_steps)}")
    if any(claimed in sources for sources in origin.values()):
        return Outcome(OutcomeKind.PARTIAL, claimed, f"{_keys(unmatched + missing)} not restored")
    return Outcome(OutcomeKind.GARBAGE, claimed, "the state after load matches no saved state")


def unreported_outcome(resumed: Run, saved: Mapping[int, object], k: int, prev: Optional[int]) -> Outcome:
    """A resume no rank reported, named from what it did: a fresh start or a
    resumed step (its state unchecked; the final state still is), else no load."""
    inferred = infer_start(resumed, sorted(saved))
    silent = f"no load was reported, and {inferred.evidence}"
    if inferred.step is None:
        return Outcome(OutcomeKind.NO_LOAD, None, f"{silent}; {REPORT_IT}")
    if inferred.fresh:
        return Outcome(OutcomeKind.FRESH, None, f"{silent}: it never resumed")
    kind = OutcomeKind.S_K if inferred.step == k else OutcomeKind.S_PREV if inferred.step == prev else OutcomeKind.OLDER
    return Outcome(kind, inferred.step, f"inferred, {silent}")


def failure_outcome(run: Run, *, ends_group: bool = True) -> Outcome:
    """A run that never recorded a load on every rank: refused, hung or half-failed.

    `ends_group`: the job's launcher ends the group when a worker exits with
    an error (torchrun's elastic agent, deepspeed's, mp.spawn), so ranks that
    raised or died while their peers waited in a collective refuse the
    checkpoint as a whole: the peers would be ended, not left hanging. Without
    it (`launcher = "plain"`) that is an error on some ranks, a live failure."""
    o = run.outcome
    problem = health(run)
    if o.timed_out and not o.stuck_after_failure:
        return Outcome(OutcomeKind.HANG, None, problem.summary if problem else "")
    errors = [r for r in run.ranks if r.status.ended_badly]
    if errors and (len(errors) == len(run.ranks) or (ends_group and group_ended(run))):
        # A rank the launcher ended because another failed raised nothing to name.
        own = [r for r in errors if not r.outcome.ended_by_launcher] or errors
        named = all(_names_a_file_or_rank(r) for r in own)
        first = own[0].error
        kind = OutcomeKind.REFUSED if named else OutcomeKind.REFUSED_UNNAMED
        peers = "" if len(errors) == len(run.ranks) else f" ({PEERS_ENDED})"
        return Outcome(kind, None, _one(str(first) if first else "died") + peers)
    if errors:
        return Outcome(OutcomeKind.SOME_ERRORS, None, problem.summary if problem else "")
    return Outcome(OutcomeKind.NO_LOAD, None, "no rank reported its load")


#: How an elastic launcher ends a group whose worker exited with an error.
PEERS_ENDED = ("its peers, waiting for it in a collective, would be ended by an elastic launcher (torchrun's agent "
               "ends the group when a worker exits with an error; launcher = plain judges them hung)")


def group_ended(run: Run) -> bool:
    """Did every rank that went wrong end (raise out of the job, or die) while
    the rest waited for it, so that an elastic launcher would end the group?
    A rank that caught its error and hangs, retries or lingers never ends:
    no launcher sees it, and the run is a hang under any."""
    return run.outcome.stuck_after_failure and any(r.status.ended_badly for r in run.ranks)


def _same_keys(loaded: Mapping[int, Record], expected: Optional[Mapping[int, Record]]) -> bool:
    return expected is not None and all(loaded[r].keys() == expected.get(r, {}).keys() for r in loaded)


def _keys(keys: list[str], limit: int = 3) -> str:
    shown = ", ".join(f"rank {k.replace(':', ' ', 1)}" for k in keys[:limit])
    return shown + (f" and {len(keys) - limit} more" if len(keys) > limit else "")


def _names_a_file_or_rank(r: RankRun) -> bool:
    error = r.error
    if error is None:
        return False
    last = error.traceback.strip().splitlines()[-1] if error.traceback.strip() else ""
    text = f"{error.message}\n{last}"
    return "rank" in text.lower() or "/" in text or _FILE_NAME.search(error.message) is not None


#: A file name in a message ("model.pt", "__0_0.distcp", ".metadata"), not a sentence's full stop.
_FILE_NAME = re.compile(r"\w\.\w|(?:^|[\s'\"`(])\.\w")


def _one(text: str, limit: int = 200) -> str:
    text = _LONG_PATH.sub(lambda m: "…/" + "/".join(m.group().split("/")[-3:]), " ".join(text.split()))
    return text if len(text) <= limit else text[: limit - 1] + "…"


#: An absolute path long enough to push the rest of a one-line message out:
#: its last three parts say which file of which checkpoint (the work
#: directory before them is in the rank's log, whole).
_LONG_PATH = re.compile(r"/[^\s'\"`:]{60,}")
