"""A case's runs as one timeline: which rank did what, in which order, where
the fault hit, where the run was cut.

A plain value (`records.timeline` builds it from the runs' records), written
as Chrome trace-event JSON, the format ui.perfetto.dev and Chrome's trace
viewers open as is, and drawn by the HTML report from the same value. One
process per rank of each run (and per process a rank spawned to save), one
thread per thread that worked on checkpoints; phases and collectives are
slices, file operations, faults and the cut are instants.
"""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any, Mapping


@dataclasses.dataclass(frozen=True)
class Slice:
    """Something that took time: a phase, a collective from entry to exit."""

    name: str
    category: str
    start: float
    end: float
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Mark:
    """A moment: a file operation, a fault, a rank blocking or ending, the cut."""

    name: str
    category: str
    at: float
    args: Mapping[str, Any] = dataclasses.field(default_factory=dict)


#: Categories of marks a person looks for first (the HTML draws them over the lanes).
FAULT, BLOCKED, CUT, STOP, END, FILE = "fault", "blocked", "cut", "stop", "end", "file"


@dataclasses.dataclass(frozen=True)
class Lane:
    """One thread of one process: the rank's main thread, an async save's writer."""

    thread: str
    slices: tuple[Slice, ...]
    marks: tuple[Mark, ...]


@dataclasses.dataclass(frozen=True)
class Track:
    """One process: a rank of one run, or a process that rank spawned to save."""

    run: str
    rank: int
    process: str
    lanes: tuple[Lane, ...]

    @property
    def label(self) -> str:
        return f"{self.run} · rank {self.rank}" + (f" · {self.process}" if self.process else "")


@dataclasses.dataclass(frozen=True)
class RunSpan:
    """Where one run lies on the timeline, and how it ended."""

    name: str
    start: float
    end: float
    ended: str


@dataclasses.dataclass(frozen=True)
class Timeline:
    case: str
    runs: tuple[RunSpan, ...]
    tracks: tuple[Track, ...]

    def marks(self, category: str) -> list[tuple[Track, Mark]]:
        return [(t, m) for t in self.tracks for lane in t.lanes for m in lane.marks if m.category == category]

    def to_trace_events(self) -> dict[str, Any]:
        """The Chrome trace-event format ("JSON Object Format"): a process per
        track, a thread per lane, complete ("X") events for slices and
        thread-scoped instants ("i") for marks, microseconds."""
        events: list[dict[str, Any]] = []
        for pid, track in enumerate(self.tracks, 1):
            events.append(_meta("process_name", pid, 0, name=track.label))
            events.append(_meta("process_sort_index", pid, 0, sort_index=pid))
            for tid, lane in enumerate(track.lanes, 1):
                events.append(_meta("thread_name", pid, tid, name=lane.thread))
                for s in lane.slices:
                    events.append({"name": s.name, "cat": s.category, "ph": "X", "ts": _us(s.start),
                                   "dur": _us(s.end) - _us(s.start), "pid": pid, "tid": tid, "args": dict(s.args)})
                for m in lane.marks:
                    events.append({"name": m.name, "cat": m.category, "ph": "i", "s": "t", "ts": _us(m.at),
                                   "pid": pid, "tid": tid, "args": dict(m.args)})
        return {"traceEvents": events, "displayTimeUnit": "ms",
                "otherData": {"case": self.case, "written by": "ckpt_harness",
                              "runs": [dataclasses.asdict(r) for r in self.runs],
                              "tracks": [{"pid": pid, "run": t.run, "rank": t.rank, "process": t.process}
                                         for pid, t in enumerate(self.tracks, 1)]}}

    @classmethod
    def from_trace_events(cls, data: Mapping[str, Any]) -> "Timeline":
        """Back from `to_trace_events` (a timeline file of a matrix the HTML report is made from later)."""
        other = data["otherData"]
        lanes: dict[tuple[int, int], tuple[list[Slice], list[Mark]]] = {}
        threads: dict[tuple[int, int], str] = {}
        for e in data["traceEvents"]:
            key = (e["pid"], e["tid"])
            if e["ph"] == "M":
                if e["name"] == "thread_name":
                    threads[key] = e["args"]["name"]
                continue
            slices, marks = lanes.setdefault(key, ([], []))
            if e["ph"] == "X":
                slices.append(Slice(e["name"], e["cat"], e["ts"] / 1e6, (e["ts"] + e["dur"]) / 1e6, e["args"]))
            elif e["ph"] == "i":
                marks.append(Mark(e["name"], e["cat"], e["ts"] / 1e6, e["args"]))
        tracks = tuple(
            Track(t["run"], t["rank"], t["process"], tuple(
                Lane(threads[pid, tid], tuple(lanes.get((pid, tid), ([], []))[0]),
                     tuple(lanes.get((pid, tid), ([], []))[1]))
                for pid, tid in sorted(k for k in threads if k[0] == t["pid"])))
            for t in other["tracks"] for pid in [t["pid"]])
        return cls(other["case"], tuple(RunSpan(**r) for r in other["runs"]), tracks)

    @classmethod
    def read(cls, path: Path) -> "Timeline":
        return cls.from_trace_events(json.loads(Path(path).read_text()))

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_trace_events(), default=str) + "\n")
        return path


def _meta(kind: str, pid: int, tid: int, **args: Any) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": args}


def _us(seconds: float) -> float:
    return round(seconds * 1e6, 3)


def file_name(case: str) -> str:
    """A case's timeline file name ("hang@r1:save4/barrier#3" -> "hang@r1_save4_barrier#3.json")."""
    return re.sub(r"[^\w.@#=+-]+", "_", case).strip("_") + ".json"
