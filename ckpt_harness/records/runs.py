"""One group run read back: each rank's records, trace and outcome joined (`Run.collect`), what the oracle reads."""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import phase as phases
from ckpt_harness.inject.collectives import Recording
from ckpt_harness.inject.faults import BLOCKING
from ckpt_harness.inject import trace
from ckpt_harness.inject.trace import Event, EventKind
from ckpt_harness.launch import GroupOutcome, RankOutcome, RankStatus
from ckpt_harness.launch.layout import warm_path
from ckpt_harness.records import Kind, read_events, read_records
from ckpt_harness.state import Record
from ckpt_harness.verdict import Breakdown


@dataclasses.dataclass(frozen=True)
class RankError:
    """The exception that ended a rank's job."""

    type: str
    message: str
    phase: str
    traceback: str

    @property
    def name(self) -> str:
        return self.type.rpartition(".")[2]

    def __str__(self) -> str:
        return f"{self.name}: {self.message}"


# -- one run, read back ------------------------------------------------------------------
@dataclasses.dataclass
class RankRun:
    outcome: RankOutcome
    records: list[dict]
    events: list[Event]

    @property
    def rank(self) -> int:
        return self.outcome.rank

    @property
    def status(self) -> RankStatus:
        return self.outcome.status

    def find(self, kind: Kind, step: Optional[int] = None) -> Optional[dict[str, Any]]:
        for record in self.records:
            if record["event"] == kind and (step is None or record.get("step") == step):
                return record
        return None

    @property
    def error(self) -> Optional[RankError]:
        found = self.find(Kind.ERROR)
        if found is None:
            return None
        return RankError(found["type"], found["message"], found["phase"], found["traceback"])

    @functools.cached_property
    def recording(self) -> Optional[Recording]:
        """Its flight recorder when the run was stopped (hung runs only)."""
        return Recording.parse(self.outcome.collectives)

    def where(self) -> str:
        return trace.where(self.events, self.recording.blocked if self.recording else None)

    @property
    def phase(self) -> Optional[str]:
        """The phase this rank was in when it ended: its error's, else the last it entered."""
        if self.error is not None:
            return self.error.phase
        return self.events[-1].phase if self.events else None

    @property
    def stopped_after(self) -> Optional[int]:
        """The save after which the harness stopped this rank, as a preemption
        would (`RunRequest.stop_after_save`), if it did."""
        found = self.find(Kind.STOPPED)
        return None if found is None else found.get("step")

    @property
    def stopped_between(self) -> Optional[int]:
        """The optimizer step after which the harness stopped this rank between
        saves (`RunRequest.stop_between`), if it did."""
        found = self.find(Kind.STOPPED)
        return None if found is None else found.get("between")

    def fired(self) -> bool:
        """Did a fault armed in this rank fire?"""
        return any(e.fault for e in self.events)

    @property
    def blocked_by(self) -> Optional[str]:
        """The injected fault that blocked this rank for good (`faults.BLOCKING`), if one fired."""
        return next((e.fault for e in self.events if e.fault in BLOCKING), None)


@dataclasses.dataclass
class Run:
    name: str
    run_dir: Path
    outcome: GroupOutcome
    ranks: list[RankRun]

    @classmethod
    def collect(cls, name: str, run_dir: Path, outcome: GroupOutcome) -> "Run":
        ranks = [RankRun(r, read_records(run_dir, r.rank), _until(read_events(run_dir, r.rank), outcome.stopped_at))
                 for r in outcome.ranks]
        return cls(name, run_dir, outcome, ranks)

    @property
    def ok(self) -> bool:
        return self.outcome.ok

    @property
    def warm_started(self) -> bool:
        """Did a rank serve a process it spawned from its template (`launch.warm`), not fresh?"""
        return any(warm_path(self.run_dir, r.rank).exists() for r in self.ranks)

    def states(self, kind: Kind, step: Optional[int] = None) -> Optional[dict[int, Record]]:
        """Each rank's state at `kind` (and `step`), or None if a rank lacks it."""
        found = {}
        for r in self.ranks:
            record = r.find(kind, step)
            if record is None:
                return None
            found[r.rank] = record["state"]
        return found

    def loaded_steps(self) -> dict[int, Optional[int]]:
        return {r.rank: r.find(Kind.LOADED)["step"] for r in self.ranks if r.find(Kind.LOADED)}

    def saved_steps(self) -> list[int]:
        """Steps whose save returned on every rank, in order."""
        per_rank = [[rec["step"] for rec in r.records if rec["event"] == Kind.SAVED] for r in self.ranks]
        return [s for s in per_rank[0] if all(s in steps for steps in per_rank[1:])]

    def done_steps(self) -> list[int]:
        """Steps whose save was done on every rank, in order: it returned and,
        if it returned in the background (a script's `dcp.async_save`, or a
        pool task or thread still writing it; its SAVED record marked so), it also landed (`Kind.LANDED`). Until then
        its writer may still be cut short, and the save before it is what a
        crash leaves."""
        def done(r: RankRun) -> set[int]:
            landed = {rec["step"] for rec in r.records if rec["event"] == Kind.LANDED}
            return {rec["step"] for rec in r.records
                    if rec["event"] == Kind.SAVED and (not rec.get("background") or rec["step"] in landed)}

        per_rank = [done(r) for r in self.ranks]
        return [s for s in self.saved_steps() if all(s in steps for steps in per_rank)]

    def published_step(self) -> Optional[int]:
        """The newest save published on every rank (see `Kind.PUBLISHED`), None if none was."""
        per_rank = [{rec["step"] for rec in r.records if rec["event"] == Kind.PUBLISHED} for r in self.ranks]
        common = set.intersection(*per_rank) if per_rank else set()
        return max(common) if common else None

    def published_steps(self) -> list[int]:
        """Saves published on every rank (see `Kind.PUBLISHED`), in order."""
        per_rank = [[rec["step"] for rec in r.records if rec["event"] == Kind.PUBLISHED] for r in self.ranks]
        return [s for s in per_rank[0] if all(s in steps for steps in per_rank[1:])] if per_rank else []

    def entries_after_save(self, step: int, kind: Kind = Kind.SAVED) -> Optional[set[str]]:
        """What the checkpoint directory held right after save `step` returned
        (`Kind.PUBLISHED`: was published), as every rank saw it (rotation may
        still have been under way on one), or None if it was not recorded (no
        keep-last)."""
        seen = [r.find(kind, step) for r in self.ranks]
        if any(record is None or record.get("entries") is None for record in seen):
            return None
        return set.intersection(*(set(record["entries"]) for record in seen))

    def events(self) -> list[Event]:
        return [e for r in self.ranks for e in r.events]

    def fired(self) -> bool:
        return any(r.fired() for r in self.ranks)

    def created_in(self, phase: str) -> set[str]:
        """Paths any rank created or renamed into place during `phase`."""
        return trace.created_in(self.events(), phase)


def saves_by_step(run: Run) -> dict[int, dict[int, Record]]:
    """step -> rank -> what that rank saved at that step (all its saves of
    the step merged), for saves whose step is known."""
    out: dict[int, dict[int, Record]] = {}
    for r in run.ranks:
        for record in r.records:
            if record["event"] == Kind.SAVED and record.get("source") != "count":
                out.setdefault(record["step"], {}).setdefault(r.rank, {}).update(record["state"])
    return out


def save_steps_by_rank(run: Run) -> dict[int, tuple[int, ...]]:
    """rank -> the step of each save it made, in order, those numbered by a
    count of saves too (a script's final save of its model)."""
    return {r.rank: tuple(rec["step"] for rec in r.records if rec["event"] == Kind.SAVED) for r in run.ranks}


def saving_after(steps_by_rank: Mapping[int, Sequence[int]], step: int) -> frozenset[int]:
    """The ranks that saved after save `step` (`save_steps_by_rank`). Where a
    rank's final state is its last save's (a script), only theirs tells
    anything about a resume from `step`: a rank whose last save was `step`
    itself, or earlier, saves nothing once resumed there (resumable.py
    --staging's rank 1 after its last save)."""
    return frozenset(rank for rank, steps in steps_by_rank.items() if any(s > step for s in steps))


def trained_at_saves(run: Run) -> dict[int, int]:
    """step -> how many optimizer steps the main thread had made when save
    `step` was made (a script's SAVED `trained`; the fewest over the ranks
    that made it), for saves whose step is known and that say it."""
    out: dict[int, int] = {}
    for r in run.ranks:
        for record in r.records:
            if record["event"] == Kind.SAVED and record.get("source") != "count" and "trained" in record:
                out[record["step"]] = min(out.get(record["step"], record["trained"]), record["trained"])
    return out


def trained_by_end(run: Run) -> Optional[int]:
    """How many optimizer steps every rank had made when it finished (a
    script's FINISHED `trained`, the fewest); None where a rank did not say."""
    counts = [(r.find(Kind.FINISHED) or {}).get("trained") for r in run.ranks]
    return None if not counts or None in counts else min(counts)


def save_steps(run: Run) -> list[int]:
    """The steps a script run saved (any rank), in order."""
    return sorted(saves_by_step(run))


def savers(run: Run, step: int) -> frozenset[int]:
    """The ranks that took part in save `step`: those a preempted run waits for."""
    return frozenset(saves_by_step(run).get(step, {}))


def _until(events: list[Event], stopped_at: Optional[float]) -> list[Event]:
    """The events of a rank up to when the harness stopped watching it: a
    deadline is judged by where each rank was then, not by how far it got
    while dumping its stack (a run cut at once must not read as a hang in a
    save it reached during the stack grace)."""
    return events if stopped_at is None else [e for e in events if e.t <= stopped_at]


# -- where the seconds went ----------------------------------------------------------------
def run_breakdown(run: Run, broken: Optional[int] = None) -> Optional[Breakdown]:
    """Where the seconds of one run went, from what it keeps anyway: the
    launcher's moments (`GroupOutcome.requested_at` ...) and each rank's
    phase changes in its trace, both `time.monotonic()`, one clock for every
    process of the machine. `broken`: the step of the save the run breaks
    (`Breakdown.faulted_save`). None for a launcher that keeps no moments.

    The launcher's window, from its request to the last process reaped, is
    cut in four: the launch; the ranks at work until the launcher first
    heard of trouble (or the run ended), split by what each rank was doing
    and averaged over the ranks; the waits after the trouble, for the run
    to end or a grace to cut it; and the teardown. A rank is in the phase it
    entered last: one that parked, or waits in a collective, stays there.
    """
    o = run.outcome
    if o.requested_at is None or o.ended_at is None:
        return None
    started = o.started_at if o.started_at is not None else o.requested_at
    decided = max(started, o.decided_at if o.decided_at is not None else o.ended_at)
    worked = max(started, min(decided, o.troubled_at if o.troubled_at is not None else decided))
    ranks = [_rank_split(r.events, started, worked, broken) for r in run.ranks] or [{"start": worked - started}]
    mean = {part: sum(split.get(part, 0.0) for split in ranks) / len(ranks) for part in _RANK_PARTS}
    return Breakdown(launch=started - o.requested_at, **mean, waits=decided - worked,
                     teardown=o.ended_at - decided, wall=o.ended_at - o.requested_at)


_RANK_PARTS = ("start", "setup", "train", "saves", "faulted_save")


def _rank_split(events: list[Event], start: float, end: float, broken: Optional[int]) -> dict[str, float]:
    """One rank's seconds in [start, end] by part: its start until the job's
    first phase, set-up until its first train step or save, then saves (the
    broken one apart) and the rest, its training. Only the rank's own phase
    changes count: a thread's or a spawned process's work is done for the
    phase of the rank that handed it over."""
    split: dict[str, float] = {}
    part, since, begun = "start", start, False
    for e in events:
        if e.kind is not EventKind.PHASE or e.fields.get("process"):
            continue
        at = min(max(e.t, start), end)
        split[part] = split.get(part, 0.0) + at - since
        step = phases.save_work(e.phase)
        begun = begun or step is not None or phases.step_of(e.phase, "train_step") is not None
        part = ("faulted_save" if step == broken else "saves") if step is not None else \
            "train" if begun else "setup"
        since = at
    split[part] = split.get(part, 0.0) + end - since
    return split
