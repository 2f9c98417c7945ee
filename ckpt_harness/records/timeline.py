"""A case's runs, read back from their records, as a `Timeline`.

Built from what the runs keep anyway (each rank's trace, the launcher's
moments), and only for the cases a person will look at (`attach`).

What a timeline cannot show: a run that does not trace file operations
(resumes, stopped runs: `RunRequest.trace_files`) shows its phases and
collectives only; a derived case (its directory cut from the golden run's
trace, `pipeline.cases`) has no faulted run, so its fault is marked on the
golden run where the cut was made.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional, Sequence

from ckpt_harness.inject.trace import Event, EventKind, pending_collective
from ckpt_harness.launch import RankStatus
from ckpt_harness.timeline import (
    BLOCKED, CUT, END, FAULT, FILE, STOP, Lane, Mark, RunSpan, Slice, Timeline, Track, file_name,
)

if TYPE_CHECKING:
    from ckpt_harness.records.runs import RankRun, Run
    from ckpt_harness.verdict import CaseResult

#: Between two runs of one timeline: they ran one after another, minutes apart
#: at times, and the minutes in between say nothing.
GAP = 0.05


@dataclasses.dataclass(frozen=True)
class Note:
    """A moment the runs' traces do not hold, told by the case: where a
    derived fault cut the golden run, what a corruption changed, what a power
    loss dropped. `at` is a `time.monotonic()` of the run (None: its start);
    `rank` None: every rank of the run."""

    run: str
    name: str
    category: str
    at: Optional[float] = None
    rank: Optional[int] = None
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)



def write_all(results: Sequence["CaseResult"], directory: Path,
              base: Optional[Path] = None) -> list["CaseResult"]:
    """Each result with a timeline, its timeline written into `directory` as
    a trace file (`CaseResult.timeline_file`, relative to `base` if given);
    the others as they are. A case judged under several properties is one file."""
    out: list["CaseResult"] = []
    written: dict[int, str] = {}
    taken: set[str] = set()
    for r in results:
        if r.timeline is not None:
            if id(r.timeline) not in written:
                name = file_name(r.case)
                while name in taken:
                    name = name.removesuffix(".json") + "+.json"
                taken.add(name)
                path = r.timeline.write(directory / name)
                written[id(r.timeline)] = os.path.relpath(path, base) if base is not None else str(path)
            r = dataclasses.replace(r, timeline_file=written[id(r.timeline)])
        out.append(r)
    return out


def attach(result: "CaseResult", runs: Sequence["Run"], notes: Iterable[Note] = (),
           every: bool = False) -> "CaseResult":
    """`result` with the timeline of `runs` when it did not pass (or for
    `every` result): built only where a person will look, since it holds
    every event of the runs."""
    if not every and result.verdict.ok:
        return result
    return dataclasses.replace(result, timeline=of_runs(result.case, runs, notes))


def of_runs(case: str, runs: Sequence["Run"], notes: Iterable[Note] = ()) -> Timeline:
    """The timeline of `runs` (in the order they ran), laid one after another."""
    notes = list(notes)
    spans, tracks = [], []
    cursor = 0.0
    for run in runs:
        origin, end = _window(run)
        shift = cursor - origin
        spans.append(RunSpan(run.name, cursor, end + shift, _ended(run)))
        mine = [n for n in notes if n.run == run.name]
        for r in run.ranks:
            tracks.extend(_tracks(run, r, shift, end, [n for n in mine if n.rank in (None, r.rank)], origin))
        cursor = end + shift + GAP
    return Timeline(case, tuple(spans), tuple(tracks))


def _window(run: "Run") -> tuple[float, float]:
    """The run's first and last moment on the machine's monotonic clock."""
    o = run.outcome
    times = [e.t for e in run.events()]
    first = min([t for t in (o.requested_at, o.started_at) if t is not None] + times, default=0.0)
    last = max([t for t in (o.stopped_at, o.ended_at) if t is not None] + times, default=first)
    return first, last


def _ended(run: "Run") -> str:
    o = run.outcome
    if o.cut is not None:
        early = f" (ended early: {o.ended_why or 'no rank could progress'})" if o.ended_early else ""
        return f"cut at the {o.cut.value}{early}"
    return "every rank finished" if o.ok else "ended with a failed rank"


def _rank_end(run: "Run", r: "RankRun", last: float) -> float:
    """When the harness stopped following this rank: the cut for one still
    running then, else its last event."""
    if run.outcome.stopped_at is not None and r.status in (RankStatus.HUNG, RankStatus.RUNNING):
        return run.outcome.stopped_at
    return max((e.t for e in r.events), default=last)


def _tracks(run: "Run", r: "RankRun", shift: float, last: float, notes: Sequence[Note],
            origin: float) -> list[Track]:
    end = _rank_end(run, r, last)
    by_process: dict[str, dict[str, list[Event]]] = {}
    for e in r.events:
        by_process.setdefault(e.fields.get("process") or "", {}).setdefault(_thread(e), []).append(e)
    by_process.setdefault("", {}).setdefault("main", [])
    out = []
    for process, threads in by_process.items():
        lanes = []
        ordered = sorted(threads.items(), key=lambda kv: (kv[0] != "main", kv[0]))
        for thread, events in ordered:
            own = not process and thread == "main"
            slices = _phases(events, end, own) + _collectives(events, end)
            marks = _marks(events)
            if own:
                marks += _endings(run, r, end) + [Mark(n.name, n.category, n.at if n.at is not None else origin,
                                                       dict(n.args)) for n in notes]
            lanes.append(Lane(thread, _shifted(_nested(slices), shift), _shifted(marks, shift)))
        out.append(Track(run.name, r.rank, process, tuple(lanes)))
    return out


def _thread(e: Event) -> str:
    return e.fields.get("thread") or "main"


def _phases(events: Sequence[Event], end: float, own: bool) -> list[Slice]:
    """The main thread's phases from its phase changes; another thread's (or
    process's) from runs of events in one phase, as it names none itself."""
    out: list[Slice] = []
    if own:
        changes = [e for e in events if e.kind is EventKind.PHASE]
        for e, nxt in zip(changes, [*changes[1:], None]):
            out.append(Slice(e.phase, "phase", e.t, nxt.t if nxt is not None else end))
        return out
    for e in events:
        if out and out[-1].name == e.phase:
            out[-1] = dataclasses.replace(out[-1], end=e.t)
        else:
            out.append(Slice(e.phase, "phase", e.t, e.t))
    return out


def _collectives(events: Sequence[Event], end: float) -> list[Slice]:
    """Each collective from entry to exit; one never left lasts to the rank's end."""
    entered: dict[int, Event] = {}
    out = []
    for e in events:
        if e.kind is not EventKind.COLLECTIVE:
            continue
        if e.entering:
            entered[e.fields["n"]] = e
        elif e.fields["n"] in entered:
            start = entered.pop(e.fields["n"])
            out.append(_collective(start, e.t, left=True))
    out.extend(_collective(e, end, left=False) for e in entered.values())
    return out


def _collective(e: Event, end: float, left: bool) -> Slice:
    args = {"phase": e.phase, "caller": e.caller, "operation": e.point}
    if e.fields.get("group") not in (None, "0"):
        args["group"] = e.fields["group"]
    if not left:
        args["never returned"] = True
    return Slice(f"{e.collective} #{e.fields['n']}", "collective", e.t, max(end, e.t), args)


def _nested(slices: list[Slice]) -> tuple[Slice, ...]:
    """Slices as trace viewers need them on one thread: each collective inside
    the phase it started in (a phase change happens between two calls, so
    this only trims clock noise)."""
    phases = [s for s in slices if s.category == "phase"]
    out = list(phases)
    for s in slices:
        if s.category == "phase":
            continue
        holder = next((p for p in phases if p.start <= s.start <= p.end), None)
        if holder is not None:
            s = dataclasses.replace(s, end=min(s.end, holder.end))
        out.append(s)
    return tuple(sorted(out, key=lambda s: (s.start, -(s.end - s.start))))


#: Operations that change a file's bytes: a run of them on one file is one mark.
_WRITES = (EventKind.WRITE, EventKind.BUFFERED_WRITE)


def _marks(events: Sequence[Event]) -> list[Mark]:
    """Faults and file operations, in order; the writes to one file in a row
    are one mark ("write f": how many operations, the bytes the job wrote and
    those the kernel got), as `ckpt-harness trace` says them: a
    save that writes a file in 4 KiB pieces is thousands of operations, and
    a person looks for the order of files, opens, fsyncs and renames."""
    out: list[Mark] = []
    run: Optional[dict[str, Any]] = None  # the args of the write mark being extended
    for e in events:
        if e.kind in _WRITES and e.point is not None:
            if run is not None and run["path"] == e.path and run["phase"] == e.phase:
                run["operations"] += e.count
            else:
                run = {"phase": e.phase, "operation": e.point, "path": e.path, "operations": e.count,
                       "bytes": 0, "buffered bytes": 0}
                out.append(Mark(f"write {e.path}", FILE, e.t, run))
            run["bytes" if e.kind is EventKind.WRITE else "buffered bytes"] += e.fields.get("n", 0)
            continue
        if e.kind is EventKind.CLOSE:
            continue  # not an operation point; the writes before it stay one mark
        run = None
        if e.kind is EventKind.FAULT:
            out.append(Mark(f"fault: {e.fault}", FAULT, e.t,
                            {"phase": e.phase, "before operation": e.fields.get("index")}))
        elif e.point is not None and e.kind is not EventKind.COLLECTIVE:
            args: dict[str, Any] = {"phase": e.phase, "operation": e.point}
            if e.count > 1:
                args["operations"] = e.count
            out.append(Mark(f"{e.kind.value} {e.target}".rstrip(), FILE, e.t, args))
    return out


def _endings(run: "Run", r: "RankRun", end: float) -> list[Mark]:
    """How the rank ended, and where it waited when it was blocked."""
    out = []
    if r.recording is not None and r.recording.blocked is not None:
        pending = pending_collective(r.events)
        at = pending.t if pending is not None else end
        out.append(Mark(f"blocked in {r.recording.blocked.label}", BLOCKED, at, {"where": r.where()}))
    if r.stopped_after is not None:
        out.append(Mark(f"stopped after save {r.stopped_after}, as a preemption would", STOP, end))
    elif r.stopped_between is not None:
        out.append(Mark(f"stopped after step {r.stopped_between}, between saves, as a preemption would", STOP, end))
    status = r.outcome.describe()
    if r.error is not None:
        status = f"raised {r.error}"
    elif r.status is RankStatus.HUNG:
        status = f"still running at the cut: {r.where()}"
    out.append(Mark(status, END, end, {"status": r.status.value}))
    o = run.outcome
    if o.cut is not None and o.stopped_at is not None:
        out.append(Mark(f"cut: {o.cut.value}", CUT, o.stopped_at,
                        {"ended early": o.ended_early,
                         "why": (o.ended_why or "no rank could progress") if o.ended_early else ""}))
    return out


def _shifted(items: Iterable[Any], shift: float) -> tuple[Any, ...]:
    out = []
    for item in items:
        if isinstance(item, Slice):
            out.append(dataclasses.replace(item, start=item.start + shift, end=item.end + shift))
        else:
            out.append(dataclasses.replace(item, at=item.at + shift))
    return tuple(out)
