"""Probes: wrap what a save is made of, record it as trace events, fire faults.

Installed in a rank before the job runs. Two families share one tracer:
collectives of `torch.distributed` (which split a save into epochs and give
the happens-before edges between ranks) and file operations under the
checkpoint directory (`files`). Every operation is a *point*: it is numbered
within its phase, recorded before it runs, and may carry the armed fault.

Events go straight to the rank's trace file with one `os.write` each, on an
O_APPEND descriptor: they survive a SIGKILL of the rank a microsecond later,
which is exactly when they matter.
"""

from __future__ import annotations

import functools
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

from ckpt_harness.inject.faults import Fault, Injector, die

#: Python-level collectives of torch.distributed. Nested calls (all_gather_object
#: calls all_gather) are recorded once, as the outermost.
COLLECTIVES = (
    "barrier",
    "monitored_barrier",
    "all_reduce",
    "all_reduce_coalesced",
    "reduce",
    "broadcast",
    "broadcast_object_list",
    "all_gather",
    "all_gather_object",
    "all_gather_into_tensor",
    "all_gather_coalesced",
    "gather",
    "gather_object",
    "scatter",
    "scatter_object_list",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "send",
    "recv",
    "send_object_list",
    "recv_object_list",
)

#: Bound before the file probes wrap `os.write`: the trace is not the job's I/O.
_write = os.write

_HARNESS_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: The built-in jobs live in the package but are job code, to be named.
_JOBS_DIR = os.path.join(_HARNESS_DIR, "jobs")


class Tracer:
    """One per rank process: the trace file, the phase, the injector."""

    def __init__(self, path: str, rank: int, faults: tuple[Fault, ...] = ()):
        self.rank = rank
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.seq = 0
        self.collectives = 0
        self.phase = "start"
        self.local = threading.local()
        self.lock = threading.RLock()
        self.injector = Injector(rank, faults, self.emit)
        #: Consecutive writes to one file, recorded as one event when nothing
        #: needs them one by one (see `record_write`).
        self.write_run: Optional[_WriteRun] = None

    def emit(self, kind: str, **fields: Any) -> int:
        with self.lock:
            self._flush_writes()
            return self._emit(kind, fields)

    def _emit(self, kind: str, fields: dict) -> int:
        self.seq += 1
        event = {"seq": self.seq, "rank": self.rank, "kind": kind, "phase": self.phase,
                 "t": time.monotonic(), **fields}
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
                self._emit(kind, {**fields, "count": 1})
                return
            index = self.injector.point(self.phase)
            run = self.write_run
            if run is None or not run.extend(kind, fields, self.phase):
                self._flush_writes()
                self.write_run = _WriteRun(index, kind, fields, self.phase)

    def _flush_writes(self) -> None:
        run, self.write_run = self.write_run, None
        if run is not None:
            phase, self.phase = self.phase, run.phase
            self._emit(*run.event())
            self.phase = phase

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
        with self.lock:
            index = self.injector.point(self.phase)
            fault = self.injector.armed(self.phase, index, op)
        self.emit(op, point=index, **fields)
        if fault is not None:
            Injector.before(fault, op, what)
        self.local.depth = getattr(self.local, "depth", 0) + 1
        try:
            result = run(fault)
        finally:
            self.local.depth -= 1
        if fault is not None and fault.kind == "crash-after":
            die()
        return result


class _WriteRun:
    """Consecutive writes to one file in one phase, recorded as one event.

    Kernel writes of a run are contiguous in the file (`offset`, `n`), since
    readers take them as one range; the job's buffered writes add to
    `job_n`. A run of one kind is an event of that kind; a mixed run is a
    `write` event whose `ops` spells the kinds of its points, run-length
    encoded ("b2w1b1": two buffered writes, a kernel write, a buffered one)."""

    def __init__(self, point: int, kind: str, fields: dict, phase: str):
        self.point, self.phase = point, phase
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
        fields = {"point": self.point, "fid": self.fid, "path": self.path, "count": self.count}
        letters = {letter for letter, _ in self.ops}
        if "w" not in letters:
            return "buffered-write", {**fields, "n": self.job_n}
        fields.update(offset=self.offset, n=self.n, data=None)
        if "b" in letters:
            fields.update(ops="".join(f"{letter}{n}" for letter, n in self.ops), job_n=self.job_n)
        return "write", fields


_OP_LETTERS = {"write": "w", "buffered-write": "b"}

_tracer: Optional[Tracer] = None


def install(trace_path: str, rank: int, *, ckpt_dir: Optional[str] = None,
            faults: tuple[Fault, ...] = (), data_log: Optional[str] = None) -> Tracer:
    """Install every probe in this process; once per process."""
    global _tracer
    if _tracer is None:
        _tracer = Tracer(trace_path, rank, faults)
        _wrap_collectives(_tracer)
        if ckpt_dir is not None:
            from ckpt_harness.inject import files

            files.install(_tracer, ckpt_dir, data_log)
    return _tracer


def set_phase(phase: str) -> None:
    if _tracer is not None:
        _tracer.set_phase(phase)


def current_phase() -> str:
    return _tracer.phase if _tracer is not None else "start"


def is_job_code(filename: str) -> bool:
    """Whether a frame's file is the job's own code: not torch, not the harness."""
    return not (
        (filename.startswith(_HARNESS_DIR) and not filename.startswith(_JOBS_DIR))
        or f"{os.sep}torch{os.sep}" in filename
        or filename.startswith("<")
    )


def frame_name(filename: str, line: int, function: str) -> str:
    return f"{os.path.basename(filename)}:{line} in {function}()"


def caller() -> str:
    """The innermost frame outside torch and the harness: the job's own code."""
    frame = sys._getframe(2)
    while frame is not None:
        if is_job_code(frame.f_code.co_filename):
            return frame_name(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
        frame = frame.f_back
    return "?"


def _wrap_collectives(tracer: Tracer) -> None:
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    for name in COLLECTIVES:
        original = getattr(c10d, name, None)
        if original is None:
            continue
        wrapped = _collective_probe(tracer, name, original)
        setattr(c10d, name, wrapped)
        if getattr(dist, name, None) is original:
            setattr(dist, name, wrapped)


def _collective_probe(tracer: Tracer, name: str, original: Callable) -> Callable:
    @functools.wraps(original)
    def probe(*args: Any, **kwargs: Any) -> Any:
        if tracer.nested():
            return original(*args, **kwargs)
        with tracer.lock:
            tracer.collectives += 1
            number = tracer.collectives
        result = tracer.operation(
            "collective", name, lambda fault: original(*args, **kwargs),
            op=name, n=number, at="enter", caller=caller(),
        )
        tracer.emit("collective", op=name, n=number, at="exit")
        return result

    return probe
