"""The tracer every probe records through, and this process's phase.

Split from the installer (`probes`) so that what the probes share sits
below all of them: the file probes (`files`) and the flight recorder's
reader (`collectives`) need the tracer and the frame helpers, and the
installer needs them, so with these in `probes` the probes imported their
installer back.

Events go straight to the rank's trace file with one `os.write` each, on an
O_APPEND descriptor: they survive a SIGKILL of the rank a microsecond later,
which is exactly when they matter.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

from ckpt_harness.inject.faults import Fault, Injector, die
from ckpt_harness.launch.rank import report_blocked

#: Bound before the file probes wrap `os.write`: the trace is not the job's I/O.
_write = os.write

_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The built-in jobs live in the package but are job code, to be named.
_JOBS_DIR = os.path.join(_HARNESS_DIR, "jobs")


class Tracer:
    """One per probed process: the trace file, the phase, the injector.

    A rank's own process has `process` ""; a process the rank spawned to do
    its saves (`probes.Child`) names itself there, and every event it records says
    so (`process`), since it is merged into its rank's events."""

    def __init__(self, path: str, rank: int, faults: tuple[Fault, ...] = (), process: str = ""):
        self.rank = rank
        self.process = process
        self.faults = faults
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.seq = 0
        self.collectives = 0
        #: The collective the main thread is in, by number (None: in none):
        #: how a preempted script's rank is seen waiting for a peer that
        #: already stopped (`rankside.script`).
        self.waiting: Optional[int] = None
        self.phase = "start"
        self.local = threading.local()
        self.lock = threading.RLock()
        self.injector = Injector(rank, faults, self.emit, on_block=report_blocked)
        #: Consecutive writes to one file, recorded as one event when nothing
        #: needs them one by one (see `record_write`).
        self.write_run: Optional[_WriteRun] = None

    def current(self) -> str:
        """The calling thread's phase: its own (a background save's, see
        `probes.follow_threads`), else the process's, which the main thread sets."""
        return getattr(self.local, "phase", None) or self.phase

    def emit(self, kind: str, **fields: Any) -> int:
        with self.lock:
            self._flush_writes()
            return self._emit(kind, fields)

    def _emit(self, kind: str, fields: dict, phase: Optional[str] = None, thread: Optional[str] = None) -> int:
        self.seq += 1
        event = {"seq": self.seq, "rank": self.rank, "kind": kind, "phase": phase or self.current(),
                 "t": time.monotonic(), **fields}
        thread = thread if thread is not None else _thread_name()
        if thread:
            event["thread"] = thread
        if self.process:
            event["process"] = self.process
        _write(self.fd, (json.dumps(event, default=str) + "\n").encode())
        return self.seq

    def record_write(self, kind: str, fields: dict, batch: bool) -> None:
        """Record one write: the job's write() into its buffer or a kernel
        write (`kind`). With `batch` (the caller numbers nothing: a rank with
        no fault armed and no bytes to log), extend the current run of
        writes to the same file instead: torch.save issues hundreds of small
        writes per file, and its buffer interleaves them with the kernel
        writes they cause. Each write keeps its point: a run records where
        it starts, and its `ops` when it mixes kinds (see `trace.Event.ops`)."""
        with self.lock:
            if not batch:
                self._flush_writes()
                self._emit(kind, {**fields, "count": 1, "caller": caller()})
                return
            where = self.current()
            index = self.injector.point(where)
            run = self.write_run
            if run is None or not run.extend(kind, fields, where):
                self._flush_writes()
                # the user's line once per run, not per write: a run is hundreds of torch.save writes
                self.write_run = _WriteRun(index, kind, fields, where, _thread_name(), caller())

    def _flush_writes(self) -> None:
        run, self.write_run = self.write_run, None
        if run is not None:
            self._emit(*run.event(), phase=run.phase, thread=run.thread)

    def set_phase(self, phase: str) -> None:
        self.phase = phase
        self.emit("phase")

    # -- the shared shape of every probed operation ---------------------------
    def nested(self) -> bool:
        """True inside another probed operation (rmtree's unlinks, all_gather_object's all_gather)."""
        return getattr(self.local, "depth", 0) > 0

    def operation(self, op: str, what: str, run: Callable[[Optional[Fault]], Any], /, **fields: Any) -> Any:
        """Number, record and run one operation, firing the fault armed at it.

        `run` gets the fault when it must act mid-operation (crash-mid, torn).
        """
        if op != "collective":  # a collective names its `caller` already
            fields["routine"] = routine()
            fields.setdefault("caller", caller())  # the user's line that made it, for reports and annotations
        fault = self.begin(op, what, fields)
        self.local.depth = getattr(self.local, "depth", 0) + 1
        try:
            result = run(fault)
        finally:
            self.local.depth -= 1
        self.end(fault)
        return result

    def begin(self, op: str, what: str, fields: dict, phase: Optional[str] = None,
              thread: Optional[str] = None) -> Optional[Fault]:
        """Number and record one operation, and fire the fault armed before
        it; returns that fault (`end` finishes it). `phase` and `thread`: the
        ones it is done for, when another thread does it for them (an object
        request on fsspec's loop thread, `objects`)."""
        with self.lock:
            where = phase or self.current()
            index = self.injector.point(where)
            fault = self.injector.armed(where, index, op, what)
            self._flush_writes()
            self._emit(op, {"point": index, **fields}, phase=where, thread=thread)
        if fault is not None:
            self.injector.before(fault, op, what)
        return fault

    def end(self, fault: Optional[Fault]) -> None:
        """The operation `begin` recorded returned: fire what acts after it."""
        if fault is not None and fault.kind == "crash-after":
            die()


class _WriteRun:
    """Consecutive writes to one file in one phase, recorded as one event.

    Kernel writes of a run are contiguous in the file (`offset`, `n`), since
    readers take them as one range; the job's buffered writes add to
    `job_n`. A run of one kind is an event of that kind; a mixed run is a
    `write` event whose `ops` spells the kinds of its points, run-length
    encoded ("b2w1b1": two buffered writes, a kernel write, a buffered one)."""

    def __init__(self, point: int, kind: str, fields: dict, phase: str, thread: str, caller: str = ""):
        self.point, self.phase, self.thread, self.caller = point, phase, thread, caller
        self.fid, self.path = fields["fid"], fields["path"]
        self.ops: list[list] = []  # [[letter, how many in a row], ...]
        self.count = 0
        self.offset: Optional[int] = None
        self.n = self.job_n = 0
        self.extend(kind, fields, phase)

    def extend(self, kind: str, fields: dict, phase: str) -> bool:
        if fields["fid"] != self.fid or phase != self.phase:
            return False
        if kind == "write":
            if self.offset is None:
                self.offset = fields["offset"]
            elif fields["offset"] != self.offset + self.n:
                return False
            self.n += fields["n"]
        else:
            self.job_n += fields["n"]
        letter = _OP_LETTERS[kind]
        if self.ops and self.ops[-1][0] == letter:
            self.ops[-1][1] += 1
        else:
            self.ops.append([letter, 1])
        self.count += 1
        return True

    def event(self) -> tuple[str, dict]:
        fields = {"point": self.point, "fid": self.fid, "path": self.path, "count": self.count,
                  "caller": self.caller}
        letters = {letter for letter, _ in self.ops}
        if "w" not in letters:
            return "buffered-write", {**fields, "n": self.job_n}
        fields.update(offset=self.offset, n=self.n, data=None)
        if "b" in letters:
            fields.update(ops="".join(f"{letter}{n}" for letter, n in self.ops), job_n=self.job_n)
        return "write", fields


_OP_LETTERS = {"write": "w", "buffered-write": "b"}


def _thread_name() -> str:
    """The thread an event happened on, "" for the main thread (most events:
    kept out of the trace)."""
    thread = threading.current_thread()
    return "" if thread is threading.main_thread() else thread.name


_tracer: Optional[Tracer] = None


def adopt(new: Tracer) -> Tracer:
    """Make `new` this process's tracer (`probes.install`, once per process):
    the one the phase calls below and `caller` read."""
    global _tracer
    _tracer = new
    return new


def tracer() -> Optional[Tracer]:
    """This process's tracer, once `probes.install` ran."""
    return _tracer


def set_phase(phase: str) -> None:
    if _tracer is not None:
        _tracer.set_phase(phase)


def current_phase() -> str:
    return _tracer.phase if _tracer is not None else "start"


def thread_phase() -> str:
    """The calling thread's phase (a background save's, see `probes.follow_threads`)."""
    return _tracer.current() if _tracer is not None else "start"


def is_job_code(filename: str) -> bool:
    """Whether a frame's file is the job's own code: not torch, not the harness."""
    return not (
        (filename.startswith(_HARNESS_DIR) and not filename.startswith(_JOBS_DIR))
        or f"{os.sep}torch{os.sep}" in filename
        or filename.startswith("<")
    )


def is_library(filename: str) -> bool:
    """Whether a frame's file is installed code (site-packages, the standard
    library): a job's own frame that is not is where it asked, and a
    library's decorator around the call is not (DeepSpeed's collectives are
    wrapped in `typing_extensions`)."""
    return (f"{os.sep}site-packages{os.sep}" in filename or f"{os.sep}dist-packages{os.sep}" in filename
            or filename.startswith(_STDLIB))


def made_by_job(frame: Any) -> bool:
    """Whether the innermost frame from `frame` out that is neither the
    standard library nor the harness is the job's own code: a write the
    script asked for itself (through `shutil`, `pathlib` or `tarfile` too),
    not one an installed framework made (its logger's files)."""
    while frame is not None:
        name = frame.f_code.co_filename
        if not (name.startswith(_STDLIB) or name.startswith(_HARNESS_DIR) and not name.startswith(_JOBS_DIR)):
            return is_job_code(name) and not is_library(name)
        frame = frame.f_back
    return False


def frame_name(filename: str, line: int, function: str) -> str:
    return f"{os.path.basename(filename)}:{line} in {function}()"


def caller() -> str:
    """The innermost frame outside torch, the harness and the standard
    library: the job's own code; for a thread running none of it (an async
    save's writer, started by torch), the thread."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_job_code(frame.f_code.co_filename) and not frame.f_code.co_filename.startswith(_STDLIB):
            return frame_name(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    name = _thread_name()
    if name:
        return f"thread {name}"
    return _tracer.process if _tracer is not None and _tracer.process else "?"


def job_functions(frame: Any) -> list[str]:
    """Every function of the job's own code on the stack from `frame` out,
    innermost first, as "file:function" (what a traceback line names)."""
    out = []
    while frame is not None:
        name = frame.f_code.co_filename
        if is_job_code(name) and not is_library(name):
            out.append(f"{name}:{frame.f_code.co_name}")
        frame = frame.f_back
    return out


def routine() -> str:
    """The job's own function a file operation was made in ("" if none):
    a script's save routine is known by the functions its checkpoint I/O
    happens in (`oracle.problems`)."""
    found = job_functions(sys._getframe(2))
    return found[0] if found else ""


_STDLIB = os.path.dirname(threading.__file__) + os.sep
