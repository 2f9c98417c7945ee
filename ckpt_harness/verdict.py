"""Verdicts, the result of one case, and how verdicts fold into one.

One vocabulary from the oracle up to the matrix: a case, a scenario and a
matrix cell each get a `Verdict`, and every fold (a scenario from its cases,
a cell from its scenarios) uses `fold`.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import TYPE_CHECKING, Any, Iterable, Optional

if TYPE_CHECKING:
    from ckpt_harness.timeline import Timeline


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
class Breakdown:
    """Where the seconds of one case went, so that speed work aims at the
    part that costs and not at the one that is easy to see; the same split
    for one run of it (its harness and judging then 0). The parts cut the
    case's wall time into pieces that do not overlap: they add up to `wall`
    (`unaccounted` is what they miss, clock noise).

    Rank-side parts (start, set-up, train, saves, the faulted save) are each
    rank's time in those phases from the launch's end until the launcher
    first heard of trouble (or the run ended), averaged over the ranks.
    `records.runs.run_breakdown` derives a run's from what it keeps anyway;
    `pipeline.clock.CaseClock` adds a case's runs to the harness's time around them.
    """

    #: Asking the fork server for the ranks until it answered with their pids.
    launch: float = 0.0
    #: From the ranks' start to the job's first phase: joining the process
    #: group (gloo's rendezvous), the probes, the job's class.
    start: float = 0.0
    #: From the job's first phase to its first train step: its set-up and
    #: load, the state captured after the load.
    setup: float = 0.0
    #: Train steps, and the end of the job's run (its final state, its teardown).
    train: float = 0.0
    #: Every save but the faulted one, with the state captured after it and
    #: what the job does once it returned (waiting for a background save).
    saves: float = 0.0
    #: The save the case breaks, likewise; in a check that breaks none, the
    #: save it is about (the stopped, overwriting or stalled one).
    faulted_save: float = 0.0
    #: The launcher waiting once a rank failed or reported itself blocked:
    #: for its peers to end, up to the failure grace, the blocked grace or
    #: the deadline. Waiting, not work: what ending a stuck run early saves.
    waits: float = 0.0
    #: From the launcher's decision that a run is over until every process
    #: of it is reaped: the stacks of a cut run, then the kill.
    teardown: float = 0.0
    #: The harness's own work outside its runs' launchers and the judging:
    #: the case directory (copied, corrupted, derived from the golden trace,
    #: the power-loss model), reading runs back, waiting for a resume another
    #: case runs (`pipeline.resumes`), a run whose launcher keeps no times.
    harness: float = 0.0
    #: From the return of the case's last run to its verdict: the oracle.
    judging: float = 0.0
    #: The case's wall time: what the parts add up to.
    wall: float = 0.0
    #: The case's run with the faults (or the stop, or the overwrite), launch to teardown.
    fault_run: float = 0.0
    #: The resume from what it left, launch to teardown (0 when shared with another case).
    resume_run: float = 0.0

    #: The parts, in the order of a run's life; they add up to `wall`.
    PARTS = ("launch", "start", "setup", "train", "saves", "faulted_save", "waits", "teardown", "harness", "judging")
    #: The case's runs, each a sum of some of the parts.
    STAGES = ("fault_run", "resume_run")

    def parts(self) -> dict[str, float]:
        return {name: getattr(self, name) for name in self.PARTS}

    @property
    def unaccounted(self) -> float:
        return self.wall - sum(self.parts().values())

    def __add__(self, other: "Breakdown") -> "Breakdown":
        return Breakdown(**{f.name: getattr(self, f.name) + getattr(other, f.name)
                            for f in dataclasses.fields(self)})

    def scaled(self, factor: float) -> "Breakdown":
        return Breakdown(**{f.name: getattr(self, f.name) * factor for f in dataclasses.fields(self)})

    @classmethod
    def mean(cls, items: Iterable["Breakdown"]) -> "Breakdown":
        """Each part's mean over `items` (all zero for none)."""
        items = list(items)
        return sum(items, cls()).scaled(1 / len(items)) if items else cls()

    def to_json(self) -> dict[str, Any]:
        """Seconds, to the millisecond (docs/ci.md, "Output for CI")."""
        return {"wall": round(self.wall, 3), "parts": {k: round(v, 3) for k, v in self.parts().items()},
                "stages": {name: round(getattr(self, name), 3) for name in self.STAGES}}


@dataclasses.dataclass(frozen=True)
class StateDiff:
    """One key of one rank whose state differs from what was expected: a row
    of the HTML report's diff table (the text report folds them, `oracle.diffs`)."""

    key: str
    rank: int
    #: What differs, as the text report says it.
    what: str
    #: "missing", "unexpected", "dtype", "shape" or "values".
    kind: str
    first_index: Optional[tuple[int, ...]] = None
    max_abs: Optional[float] = None

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "rank": self.rank, "what": self.what, "kind": self.kind,
                "first_index": list(self.first_index) if self.first_index is not None else None,
                "max_abs": self.max_abs}


@dataclasses.dataclass(frozen=True)
class Operation:
    """One operation of one rank in a run: where a fault can be armed
    (`pipeline.baseline.Point`), and where a case's fault struck (`Site`)."""

    rank: int
    phase: str
    #: The operation's number among the rank's operations in `phase`.
    index: int
    op: str
    #: The file (relative to the checkpoint directory) or the collective's name.
    target: str
    caller: str = ""


@dataclasses.dataclass(frozen=True)
class Site(Operation):
    """Where a case's one fault struck: one operation of one rank, with the
    user's line that made it. What groups failing cases into the findings
    they share (`oracle.findings`)."""

    fault: str = dataclasses.field(kw_only=True)

    @classmethod
    def at(cls, where: Operation, fault: str) -> "Site":
        return cls(**{f.name: getattr(where, f.name) for f in dataclasses.fields(Operation)}, fault=fault)

    def to_json(self) -> dict[str, Any]:
        return {"fault": self.fault, **{f.name: getattr(self, f.name) for f in dataclasses.fields(Operation)}}


#: Columns of an exploration's table (a case's `cells`), then property and verdict.
EXPLORE_COLUMNS = ("rank", "#", "op", "target", "called from", "fault", "outcome")


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
    #: Row of an exploration table (`EXPLORE_COLUMNS`).
    cells: tuple[str, ...] = ()
    #: The case whose resume this one was judged against: both left the same
    #: checkpoint directory (`resumes`).
    shares: Optional[str] = None
    #: Where the case's seconds went; None where no clock ran (the golden run's
    #: checks, a case the harness failed before it started).
    timings: Optional[Breakdown] = dataclasses.field(default=None, compare=False)
    #: The same case judged under other properties, this one being the worst
    #: (`oracle.judge_fault`): each lands in its own property's matrix cell.
    also: tuple["CaseResult", ...] = ()
    #: The case's runs, rank by rank (`pipeline.clock.CaseClock.stamp`): for a case
    #: that did not pass, or every case when asked; None where no run was timed.
    timeline: Optional["Timeline"] = dataclasses.field(default=None, compare=False, repr=False)
    #: Where `timeline` was written as a trace file (`records.timeline.write_all`).
    timeline_file: Optional[str] = dataclasses.field(default=None, compare=False)
    #: The state differences behind a FAIL of a state comparison, key by key.
    differences: tuple[StateDiff, ...] = dataclasses.field(default=(), compare=False, repr=False)
    #: What the resume after a fault gave (`oracle.OutcomeKind`'s value: "S_prev", "refused"...);
    #: None for a judgment with no such resume. Part of why it failed (`oracle.causes`).
    outcome: Optional[str] = None
    #: A run of the case started a process its rank spawned from the rank's
    #: template (`launch.warm`), not fresh: a verdict other than pass is then
    #: confirmed by a cold run (`pipeline.confirm`).
    warm: bool = dataclasses.field(default=False, compare=False)
    #: This is that cold run's verdict, the warm one's said in `details`.
    confirmed_cold: bool = dataclasses.field(default=False, compare=False)
    #: Where its one fault struck; None for a case of no fault, of several, or with no point.
    site: Optional[Site] = dataclasses.field(default=None, compare=False)
    #: What its report notes beside the verdict: a difference judged inert by
    #: its consequence (`oracle.inert`), named so that a person still sees it.
    note: Optional[str] = dataclasses.field(default=None, compare=False)

    def cell(self, column: str) -> str:
        """Its exploration table's cell in `column` ("" if it has no row)."""
        return dict(zip(EXPLORE_COLUMNS, self.cells)).get(column, "")

    def judgments(self) -> tuple["CaseResult", ...]:
        """This judgment and those riding along, one per property."""
        return (self, *self.also)

    def explain(self) -> str:
        block = [f"--- {self.case} / {self.check}: {self.verdict.value.upper()} — {self.summary}"]
        if self.details:
            block.append(self.details.rstrip())
        if self.repro:
            block.append(f"repro: {self.repro}")
        if self.timeline_file:
            block.append(f"timeline: {self.timeline_file} (open in ui.perfetto.dev)")
        return "\n".join(block)
