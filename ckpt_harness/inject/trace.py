"""Reading trace files back: what each rank did, and where it stopped.

Probes write one JSON object per line (cheap, and a torn last line after a
SIGKILL costs only that line). Readers get typed `Event`s; the complete
record stays in `Event.fields` for the durability model, which replays
every field of file operations.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Optional

from ckpt_harness.inject.faults import BLOCKING

if TYPE_CHECKING:
    from ckpt_harness.inject.collectives import Collective

#: What a trace names a path outside the checkpoint directory by (the source of a rename into it).
OUTSIDE = "<outside>"


class EventKind(str, enum.Enum):
    PHASE = "phase"
    COLLECTIVE = "collective"
    OPEN = "open"
    #: Bytes reaching the kernel: a write(2) under the job's buffer, or
    #: `os.write`. What changes a file, and what a power loss may keep.
    WRITE = "write"
    #: The job's own `write()` on a buffered or text file: its bytes may sit
    #: in the process's buffer until a later `write` (flush, close).
    BUFFERED_WRITE = "buffered-write"
    CLOSE = "close"
    FSYNC = "fsync"
    RENAME = "rename"
    UNLINK = "unlink"
    MKDIR = "mkdir"
    RMDIR = "rmdir"
    RMTREE = "rmtree"
    #: Requests to a bucket (`objects`, `faults.OBJECT_OPS`).
    PUT = "put"
    UPLOAD = "upload"
    PART = "part"
    COMPLETE = "complete"
    COPY = "copy"
    DELETE = "delete"
    #: Looks that change nothing (`faults.LOOKS`): `os.stat` and a listing (HeadObject and a bucket's listing).
    STAT = "stat"
    LIST = "list"
    #: An armed fault fired (before the operation it is armed at).
    FAULT = "fault"
    #: A script's functions first seen around an optimizer step, or calling a
    #: save entry point (`saves.Saves._note`).
    TRAINS = "trains"
    SAVES = "saves"


#: Operations that create a path (so a save "wrote" it).
CREATING = (EventKind.OPEN, EventKind.RENAME, EventKind.MKDIR, EventKind.PUT, EventKind.COMPLETE, EventKind.COPY)


@dataclasses.dataclass(frozen=True)
class Event:
    kind: EventKind
    rank: int
    phase: str
    t: float
    #: Index of this operation within its phase; None for events that are
    #: not operations (phase changes, closes, collective exits, faults).
    point: Optional[int]
    #: Operations this event stands for (a batched run of writes to one file).
    count: int
    #: The whole record as the probe wrote it.
    fields: Mapping[str, Any] = dataclasses.field(repr=False, compare=False)

    @classmethod
    def parse(cls, record: Mapping[str, Any]) -> "Event":
        return cls(EventKind(record["kind"]), record.get("rank", -1), record["phase"], record.get("t", 0.0),
                   record.get("point"), record.get("count", 1), record)

    @property
    def ops(self) -> tuple[str, ...]:
        """The operation at each point this event stands for: a run of
        writes to one file may interleave the job's buffered writes with
        the kernel writes they cause (`ops` spells them, "b2w1": two buffered
        writes, then a kernel write)."""
        spelled = self.fields.get("ops")
        if spelled is None:
            return (self.kind.value,) * self.count
        return tuple(op for letter, n in re.findall(r"([bw])(\d+)", spelled)
                     for op in [EventKind.BUFFERED_WRITE.value if letter == "b" else EventKind.WRITE.value] * int(n))

    @property
    def path(self) -> str:
        """The file or directory (relative to the checkpoint dir); a rename's destination."""
        return self.fields.get("dst") if self.kind is EventKind.RENAME else self.fields.get("path", "")

    @property
    def collective(self) -> str:
        return self.fields.get("op", "")

    @property
    def caller(self) -> str:
        return self.fields.get("caller", "")

    @property
    def target(self) -> str:
        """What the operation acts on, for reports: a collective's name, a path, or src -> dst."""
        if self.kind is EventKind.COLLECTIVE:
            return self.collective
        if self.kind is EventKind.RENAME:  # as the probe names it (`files.path_op`): the injector matches it
            src, dst = self.fields.get("src"), self.fields.get("dst")
            return f"{src if src is not None else OUTSIDE} -> {dst if dst is not None else OUTSIDE}"
        if self.kind is EventKind.COPY:  # as `objects.Prefix.request` names it; a source elsewhere is None
            return f"{self.fields.get('src')} -> {self.fields.get('dst')}"
        return self.fields.get("path", "")

    @property
    def fault(self) -> Optional[str]:
        return self.fields.get("fault") if self.kind is EventKind.FAULT else None

    @property
    def entering(self) -> bool:
        """A collective's entry (its exit is a separate event)."""
        return self.kind is EventKind.COLLECTIVE and self.fields.get("at") == "enter"


def read_events(path: Path) -> list[Event]:
    """Every complete event of a rank's trace (a torn last line is dropped)."""
    events = []
    try:
        text = Path(path).read_text()
    except OSError:
        return events
    for line in text.splitlines():
        try:
            events.append(Event.parse(json.loads(line)))
        except ValueError:
            break
    return events


def merge_processes(traces: list[list[Event]]) -> list[Event]:
    """The traces of one rank's processes (its own, then those it spawned to
    save) as one: by time (CLOCK_MONOTONIC is one clock for every process of
    the machine), each trace keeping its own order, `seq` renumbered so that
    the rank's events are again in one order (the durability model replays
    a rank by `seq`)."""
    merged = heapq.merge(*traces, key=lambda e: e.t)
    return [dataclasses.replace(e, fields={**e.fields, "seq": i}) for i, e in enumerate(merged, 1)]


def fields(events: Iterable[Event]) -> list[Mapping[str, Any]]:
    """The raw records, as the durability model replays them."""
    return [e.fields for e in events]


def pending_collective(events: list[Event]) -> Optional[Event]:
    """The collective this rank entered and never left, if any (the latest)."""
    pending = pending_collectives(events)
    return pending[-1] if pending else None


def pending_collectives(events: list[Event]) -> list[Event]:
    """Every collective this rank entered and never left, in order: more than
    one when a thread besides the main one (an async save's writer) was in one."""
    open_calls: dict[tuple[str, int], Event] = {}  # numbered per process
    for event in events:
        if event.kind is not EventKind.COLLECTIVE:
            continue
        key = (event.fields.get("process", ""), event.fields["n"])
        if event.entering:
            open_calls[key] = event
        else:
            open_calls.pop(key, None)
    return sorted(open_calls.values(), key=lambda e: (e.t, e.fields["n"]))


def _in_thread(e: Event) -> str:
    """"barrier #9 on the main thread during save 2" (and the group when it is not the default one)."""
    return f"{e.collective} #{e.fields['n']}{_group(e)} {on_thread(e)} during {e.phase}"


def _group(e: Event) -> str:
    group = e.fields.get("group")
    return f" on group {group}" if group not in (None, "0") else ""


def on_thread(e: Event) -> str:
    """"on the main thread", "on thread AsyncCheckpointExecutor_0", "in
    checkpoint process" (a process the rank spawned to save)."""
    thread, process = e.fields.get("thread"), e.fields.get("process")
    if process:
        return f"in {process}" + (f" (thread {thread})" if thread else "")
    return f"on thread {thread}" if thread else "on the main thread"


def where(events: list[Event], blocked: Optional[Collective] = None) -> str:
    """One line: where a rank was when it stopped, for hang and crash reports.

    `blocked` is the collective the flight recorder says the rank waits in:
    it is numbered as on every other rank, and seen even when C++ issued it.
    """
    blocked_by = next((e for e in events if e.fault in BLOCKING), None)
    if blocked_by is not None:  # the rank never returned from it
        inside = f" in {blocked_by.fields['process']}" if blocked_by.fields.get("process") else ""
        at = (f"{BLOCKING[blocked_by.fault]}{inside} before operation #{blocked_by.fields['index']} of "
              f"{blocked_by.phase}")
        # A hang blocks the thread it fired on: another than the main one (a save's writer) leaves the rank going.
        thread = blocked_by.fields.get("thread") if not inside and blocked_by.fault == "hang" else None
        return f"(its thread {thread}) {at}, its main thread going on" if thread else at
    pending = pending_collective(events)
    threads = pending_collectives(events)
    if len(threads) > 1:  # two threads of the rank in collectives: say each
        head = f"waiting in {blocked.label}{f' ({blocked.origin})' if blocked.origin else ''}; " if blocked else ""
        return f"{head}in {' and '.join(_in_thread(e) for e in threads)}"
    if blocked is not None:
        if pending is not None and pending.caller == blocked.caller:  # the job's own call, as probed
            return f"waiting in {pending.collective} #{blocked.seq} called from {pending.caller} during {pending.phase}"
        origin = f" ({blocked.origin})" if blocked.origin else ""
        return f"waiting in {blocked.label}{origin} during {events[-1].phase if events else 'start'}"
    if pending is not None:
        process = pending.fields.get("process")
        inside = f" in {process}" if process else ""
        called = f" called from {pending.caller}" if pending.caller != process else ""
        return f"waiting{inside} in {pending.collective} #{pending.fields['n']}{called} during {pending.phase}"
    phase = events[-1].phase if events else None
    return f"in {phase}, not in a collective" if phase else "before the job started"


def created_in(events: Iterable[Event], phase: str) -> set[str]:
    """Paths a phase created or renamed into place (files or directories)."""
    return {e.path for e in events if e.phase == phase and e.kind in CREATING and e.path and e.path != OUTSIDE}


def landings(events: Iterable[Event]) -> dict[str, str]:
    """Files written outside the checkpoint directory that a rename brought
    in: their fids and absolute paths -> the path they landed at. Their
    operations are points a fault may break (`files`); those of other
    files a save writes outside it touch no checkpoint."""
    fids: dict[str, list[str]] = {}  # absolute path -> fids that wrote it
    out: dict[str, str] = {}
    for e in sorted(events, key=lambda e: (e.t, e.rank, e.fields.get("seq", 0))):
        f = e.fields
        if e.kind is EventKind.OPEN and f.get("outside"):
            fids.setdefault(f["outside"], []).append(f["fid"])
        elif e.kind is EventKind.RENAME and f.get("src_outside") and f.get("dst") is not None:
            out[f["src_outside"]] = f["dst"]
            out.update(dict.fromkeys(fids.pop(f["src_outside"], ()), f["dst"]))
    return out


def landing(event: Event, landed: Mapping[str, str]) -> Optional[str]:
    """Where the outside file `event` acts on landed (`landings`); None for
    any other event, and for an outside file that never came in."""
    f = event.fields
    if f.get("path") != OUTSIDE or event.kind is EventKind.RENAME:
        return None
    return landed.get(f.get("fid") or "") or landed.get(f.get("outside") or "")


@dataclasses.dataclass(frozen=True)
class Unseen:
    """A file of the checkpoint directory holding more bytes than any traced write put there."""

    path: str
    #: It came in by a rename from outside the checkpoint directory: written
    #: there (a temporary file elsewhere, as fsspec's local transactions and
    #: Lightning write), where the probes do not follow writes. Otherwise it
    #: was written through a channel they cannot see (`mmap`, `sendfile`,
    #: native code).
    renamed_in: bool = False


def unseen_writes(events: Iterable[Event], sizes: Mapping[str, int]) -> list[Unseen]:
    """Files of `sizes` (relative path -> bytes on disk now) holding more bytes
    than any traced write put there, so no fault or power loss ever touched
    those bytes: written outside the checkpoint directory and renamed in, or
    through a channel the probes cannot see (`mmap`, `sendfile`, native code).

    Replays opens, writes, renames and removals of every rank; a file is an
    inode-like cell shared by its descriptors and names, so data written
    through a descriptor after a rename still counts."""
    names: dict[str, list] = {}  # path -> [bytes traced, renamed in from outside]; one list per file
    outside: dict[str, list] = {}  # the same, of files written outside the checkpoint directory (`files`)
    fids: dict[str, list] = {}
    for e in sorted(events, key=lambda e: (e.t, e.rank, e.fields.get("seq", 0))):
        f = e.fields
        if e.kind is EventKind.OPEN:
            place, key = (outside, f["outside"]) if f.get("outside") else (names, f["path"])
            cell = place.get(key) if not f.get("trunc") else None
            place[key] = fids[f["fid"]] = cell if cell is not None else [0, False]
        elif e.kind is EventKind.WRITE and f.get("fid") in fids:
            cell = fids[f["fid"]]
            cell[0] = max(cell[0], f["offset"] + f["n"])
        elif e.kind is EventKind.RENAME and f.get("src") is None and f.get("dst") is not None:
            for p in _under(names, f["dst"]):  # what it replaces
                del names[p]
            cell = names[f["dst"]] = outside.pop(f.get("src_outside") or "", None) or [0, False]
            cell[1] = True
        elif e.kind is EventKind.RENAME and f.get("src") is not None:
            moved = {p: names.pop(p) for p in _under(names, f["src"])}
            if f.get("dst") is not None:
                names.update({f["dst"] + p[len(f["src"]):]: cell for p, cell in moved.items()})
        elif e.kind in (EventKind.UNLINK, EventKind.RMDIR, EventKind.RMTREE):
            for p in _under(names, f.get("path", "")):
                del names[p]
        # a bucket's objects: seen whole once put, completed or copied (a request carries the whole object)
        elif e.kind in (EventKind.PUT, EventKind.COMPLETE) and f.get("path"):
            names[f["path"]] = [float("inf"), False]
        elif e.kind is EventKind.COPY and f.get("dst"):
            names[f["dst"]] = names.get(f.get("src") or "", [float("inf"), False]) if f.get("src") else [0, False]
        elif e.kind is EventKind.DELETE:
            for path in f.get("paths") or [f.get("path", "")]:
                for p in _under(names, path):
                    del names[p]
    return [Unseen(p, names.get(p, [0, False])[1]) for p, size in sorted(sizes.items())
            if size > names.get(p, [0, False])[0]]


def _under(names: Mapping[str, Any], path: str) -> list[str]:
    return [p for p in names if p == path or p.startswith(path + "/")]


def describe_phase(events: list[Event], phase: str) -> str:
    """One line of a rank's operations in `phase`, in order (`ckpt-harness trace`)."""
    parts: list[str] = []
    # writes to one file in a row are one part: bytes the job wrote, bytes the kernel got
    written: Optional[tuple[str, int, int]] = None
    for e in events:
        if e.phase != phase or e.point is None or e.kind is EventKind.OPEN:
            continue  # an open is told by the write that follows it
        if e.kind in (EventKind.WRITE, EventKind.BUFFERED_WRITE):
            path, job, kernel = written if written is not None and written[0] == e.path else (e.path, 0, 0)
            if written is not None and written[0] == e.path:
                parts.pop()
            if e.kind is EventKind.WRITE:
                kernel += e.fields["n"]
                job += e.fields.get("job_n", 0)
            else:
                job += e.fields["n"]
            pending = f", {job - kernel} buffered" if job > kernel else ""
            parts.append(f"write {path} ({kernel} bytes{pending})")
            written = (path, job, kernel)
            continue
        written = None
        if e.kind is EventKind.COLLECTIVE:
            parts.append(f"{e.collective}#{e.fields['n']}")
        elif e.kind is EventKind.RENAME:
            parts.append(f"rename {e.fields['src'] or OUTSIDE} → {e.fields['dst'] or OUTSIDE}")
        elif e.kind is EventKind.COPY:
            parts.append(f"copy {e.fields.get('src')} to {e.fields.get('dst')}")
        elif e.kind in (EventKind.PUT, EventKind.PART) and e.fields.get("n") is not None:
            parts.append(f"{e.kind.value} {e.fields.get('path', '')} ({e.fields['n']} bytes)")
        else:
            parts.append(f"{e.kind.value} {e.fields.get('path', '')}".rstrip())
    return " → ".join(parts)
