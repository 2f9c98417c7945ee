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

import dataclasses
import functools
import json
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

from ckpt_harness import phase as phase_mod
from ckpt_harness.inject.faults import Fault, Injector, die
from ckpt_harness.launch.link import ChildLink, join_rank, link_for_child
from ckpt_harness.launch.rank import report_blocked

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
    """One per probed process: the trace file, the phase, the injector.

    A rank's own process has `process` ""; a process the rank spawned to do
    its saves (`Child`) names itself there, and every event it records says
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
        #: already stopped (`script_runner`).
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
        `follow_threads`), else the process's, which the main thread sets."""
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
                self._emit(kind, {**fields, "count": 1})
                return
            where = self.current()
            index = self.injector.point(where)
            run = self.write_run
            if run is None or not run.extend(kind, fields, where):
                self._flush_writes()
                self.write_run = _WriteRun(index, kind, fields, where, _thread_name())

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
        with self.lock:
            where = self.current()
            index = self.injector.point(where)
            fault = self.injector.armed(where, index, op)
        self.emit(op, point=index, **fields)
        if fault is not None:
            self.injector.before(fault, op, what)
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

    def __init__(self, point: int, kind: str, fields: dict, phase: str, thread: str):
        self.point, self.phase, self.thread = point, phase, thread
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


def _thread_name() -> str:
    """The thread an event happened on, "" for the main thread (most events:
    kept out of the trace)."""
    thread = threading.current_thread()
    return "" if thread is threading.main_thread() else thread.name

_tracer: Optional[Tracer] = None
#: Where a child process of this rank keeps its trace and data log: actor -> (trace, data log or None).
_child_paths: Optional[Callable[[str], tuple[str, Optional[str]]]] = None
_ckpt_dir: Optional[str] = None


def install(trace_path: str, rank: int, *, ckpt_dir: Optional[str] = None,
            faults: tuple[Fault, ...] = (), data_log: Optional[str] = None,
            thread_phases: bool = False, process: str = "", actor: str = "",
            child_paths: Optional[Callable[[str], tuple[str, Optional[str]]]] = None) -> Tracer:
    """Install every probe in this process; once per process. With
    `thread_phases`, work handed to another thread runs in a phase of its
    own (`follow_threads`). `child_paths(actor)` is where a process the
    rank spawns for its saves records (`child`); `process` and `actor` name
    this process when it is such a child (in events; in file ids and data refs)."""
    global _tracer, _child_paths, _ckpt_dir
    if _tracer is None:
        _tracer = Tracer(trace_path, rank, faults, process)
        _child_paths, _ckpt_dir = child_paths, ckpt_dir
        _wrap_collectives(_tracer)
        if thread_phases:
            follow_threads(_tracer)
        if ckpt_dir is not None:
            from ckpt_harness.inject import files

            files.install(_tracer, ckpt_dir, data_log, actor)
    return _tracer


# -- processes a rank spawns to save (DCP's checkpoint process) -------------------------
@dataclasses.dataclass(frozen=True)
class Child:
    """What a process spawned by a rank needs to run with the rank's probes:
    picklable, handed to it with its target (`inject.dcp_process`).

    A spawned process is a fresh interpreter: nothing installed in the rank
    is in it. With this it records into a trace of its own (merged into its
    rank's events by `records`, each event naming the process), logs its
    bytes for the power-loss model, and fires the rank's faults armed at its
    points; its points are numbered per phase in its own order, like a
    writer thread's (its phases are the rank's background ones, "bg_save 4",
    which the rank's own threads do not reach once the work is handed over)."""

    rank: int
    actor: str
    trace: str
    data_log: Optional[str]
    ckpt_dir: Optional[str]
    faults: tuple[Fault, ...]
    #: Its first phase: the one of the work that spawned it.
    phase: str
    #: Seconds for its process groups' collectives, as the rank's own.
    pg_timeout: Optional[float]
    #: Its link to the rank (`launch.link.link_for_child`): a blocking fault
    #: fired in it starts its peers' budget as one in the rank does, and a
    #: hang report has its stack.
    link: Optional[ChildLink] = None


def child(actor: str, pg_timeout: Optional[float] = None) -> Optional[Child]:
    """The probes' share for a process this rank is about to spawn, named
    `actor` (a file-name word: "ckpt"); None when no probe runs here or the
    runner gave no place for a child's records."""
    if _tracer is None or _child_paths is None:
        return None
    trace, data_log = _child_paths(actor)
    return Child(_tracer.rank, actor, trace, data_log, _ckpt_dir, _tracer.faults, _tracer.current(), pg_timeout,
                 link_for_child())


def install_child(spec: Child, process: str) -> Tracer:
    """In the spawned process: install the probes as `spec` says, the
    process named `process` in every event ("checkpoint process"), in
    the phase of the work that spawned it."""
    if spec.pg_timeout is not None:
        # What the launcher gives a rank's groups (`launch.worker._default_timeouts`):
        # a peer whose partner died fails in time instead of after gloo's 30 min.
        from datetime import timedelta

        import torch.distributed.distributed_c10d as c10d

        c10d.default_pg_timeout = timedelta(seconds=spec.pg_timeout)
    join_rank(spec.link, process)
    tracer = install(spec.trace, spec.rank, ckpt_dir=spec.ckpt_dir, faults=spec.faults, data_log=spec.data_log,
                     process=process, actor=spec.actor)
    tracer.set_phase(spec.phase)
    return tracer


#: Framework modules that spawn processes to save, and the harness module
#: that gives those processes the rank's probes (its `follow()`).
SPAWNERS = {"torch.distributed.checkpoint._async_process_executor": "ckpt_harness.inject.dcp_process"}


def follow_children() -> None:
    """Give the save processes of every framework the job has imported so far
    the rank's probes (`SPAWNERS`); idempotent, framework imports stay in
    their follower's module. Without it a process spawned to write the save
    is a fresh interpreter no probe runs in."""
    if _tracer is None or _child_paths is None:
        return
    import importlib

    for module, follower in SPAWNERS.items():
        if module in sys.modules:
            importlib.import_module(follower).follow()


def thread_phase() -> str:
    """The calling thread's phase (a background save's, see `follow_threads`)."""
    return _tracer.current() if _tracer is not None else "start"


def follow_threads(tracer: Tracer) -> None:
    """Give work handed to a thread pool or a new thread the phase
    `phase.background(<the phase that handed it over>)`: "bg_save 4" for what
    `dcp.async_save`'s writer thread does for save 4.

    Without it an event takes whatever phase the main thread set last, so a
    background save's operations would be numbered among the main thread's
    (in "train_step 5", say), at indices that move with thread scheduling: no
    fault could be armed at them reproducibly. With it, they are points of
    their own phase, numbered in the order that thread performs them,
    whatever the main thread does meanwhile. Work handed over by a thread
    already in a background phase keeps that phase (DCP's executor submits
    from its own pool)."""
    from concurrent.futures import ThreadPoolExecutor

    def handed_over(fn: Callable) -> Callable:
        where = phase_mod.background(tracer.current())

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            before = getattr(tracer.local, "phase", None)
            tracer.local.phase = where
            try:
                return fn(*args, **kwargs)
            finally:
                tracer.local.phase = before

        return run

    submit = ThreadPoolExecutor.submit

    @functools.wraps(submit)
    def submit_in_phase(self: ThreadPoolExecutor, fn: Callable, /, *args: Any, **kwargs: Any) -> Any:
        return submit(self, handed_over(fn), *args, **kwargs)

    ThreadPoolExecutor.submit = submit_in_phase  # type: ignore[method-assign]

    start = threading.Thread.start

    @functools.wraps(start)
    def start_in_phase(self: threading.Thread) -> None:
        self.run = handed_over(self.run)  # type: ignore[method-assign]
        start(self)

    threading.Thread.start = start_in_phase  # type: ignore[method-assign]


def set_phase(phase: str) -> None:
    if _tracer is not None:
        _tracer.set_phase(phase)


def tracer() -> Optional[Tracer]:
    """This process's tracer, once `install` ran."""
    return _tracer


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


_STDLIB = os.path.dirname(threading.__file__) + os.sep


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
        group = kwargs.get("group")
        named = {"group": group.group_name} if group is not None and hasattr(group, "group_name") else {}
        main = threading.current_thread() is threading.main_thread()
        if main:
            tracer.waiting = number
        try:
            result = tracer.operation(
                "collective", name, lambda fault: original(*args, **kwargs),
                op=name, n=number, at="enter", caller=caller(), **named,
            )
        finally:
            if main:
                tracer.waiting = None
        tracer.emit("collective", op=name, n=number, at="exit")
        return result

    return probe
