"""Probes: wrap what a save is made of, record it as trace events, fire faults.

Installed in a rank before the job runs. Two families share one tracer
(`tracer`): collectives of `torch.distributed` (which split a save into
epochs and give the happens-before edges between ranks) and file
operations under the checkpoint directory (`files`). Every operation is a
*point*: it is numbered within its phase, recorded before it runs, and may
carry the armed fault. This module only installs them, in the rank and in
the processes it spawns to save; the rank side, which installed them, also
drives their phases through it (`set_phase`, `current_phase`, `tracer`,
from `tracer`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import sys
import threading
import time
from typing import Any, Callable, Optional

from ckpt_harness import phase as phase_mod
from ckpt_harness.inject import files
from ckpt_harness.inject.faults import Fault
from ckpt_harness.inject.tracer import Tracer, adopt, caller, current_phase, set_phase, tracer  # noqa: F401
from ckpt_harness.inject.writers import WRITERS
from ckpt_harness.launch import beacon
from ckpt_harness.launch.link import ChildLink, join_rank, link_for_child

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

#: Where a child process of this rank keeps its trace and data log: actor -> (trace, data log or None).
_child_paths: Optional[Callable[[str], tuple[str, Optional[str]]]] = None
_ckpt_dir: Optional[str] = None
_ckpt_url = ""


def install(trace_path: str, rank: int, *, ckpt_dir: Optional[str] = None,
            faults: tuple[Fault, ...] = (), data_log: Optional[str] = None,
            thread_phases: bool = False, process: str = "", actor: str = "",
            child_paths: Optional[Callable[[str], tuple[str, Optional[str]]]] = None,
            ckpt_url: str = "") -> Tracer:
    """Install every probe in this process; once per process. With
    `thread_phases`, work handed to another thread runs in a phase of its
    own (`follow_threads`). `child_paths(actor)` is where a process the
    rank spawns for its saves records (`child`); `process` and `actor` name
    this process when it is such a child (in events; in file ids and data refs).
    A `ckpt_url` of a bucket has its requests probed too (`objects`)."""
    global _child_paths, _ckpt_dir, _ckpt_url
    if tracer() is None:
        installed = adopt(Tracer(trace_path, rank, faults, process))
        _child_paths, _ckpt_dir, _ckpt_url = child_paths, ckpt_dir, ckpt_url
        _wrap_collectives(installed)
        if thread_phases:
            follow_threads(installed)
        if ckpt_dir is not None:
            files.install(installed, ckpt_dir, data_log, actor, own=os.path.dirname(trace_path))
            if "://" in ckpt_url:
                from ckpt_harness.inject import objects

                objects.install(installed, ckpt_url)
    return tracer()


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
    #: The rank's checkpoint URL, when its checkpoints are in a bucket (`objects`).
    ckpt_url: str = ""


def child(actor: str, pg_timeout: Optional[float] = None) -> Optional[Child]:
    """The probes' share for a process this rank is about to spawn, named
    `actor` (a file-name word: "ckpt"); None when no probe runs here or the
    runner gave no place for a child's records."""
    here = tracer()
    if here is None or _child_paths is None:
        return None
    trace, data_log = _child_paths(actor)
    return Child(here.rank, actor, trace, data_log, _ckpt_dir, here.faults, here.current(), pg_timeout,
                 link_for_child(), _ckpt_url)


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
                     process=process, actor=spec.actor, ckpt_url=spec.ckpt_url)
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
    if tracer() is None or _child_paths is None:
        return
    import importlib

    for module, follower in SPAWNERS.items():
        if module in sys.modules:
            importlib.import_module(follower).follow()


#: `Thread.start` as it was before `follow_threads` wrapped it.
_start = threading.Thread.start


def harness_thread(target: Callable[[], None], name: str) -> threading.Thread:
    """Start a daemon thread of the harness's own, not followed: what it does
    is no work the code under test handed over, so it neither takes a
    background phase nor counts as work to come (`beacon.nothing_left`)."""
    thread = threading.Thread(target=target, name=name, daemon=True)
    _start(thread)
    return thread


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
    from its own pool). Work handed over in a save's phase is one of that
    save's writers (`writers.WRITERS`), until it returns or raises: how a
    save that returns nothing to wait on (Lightning's `AsyncCheckpointIO`,
    a trainer's own thread) is known to land."""
    from concurrent.futures import ThreadPoolExecutor
    from concurrent.futures.thread import _worker as pool_worker

    def handed_over(fn: Callable, writer: bool = True) -> Callable:
        where = phase_mod.background(tracer.current())
        slot = beacon.mine()
        if slot is not None:  # counted from the hand-over: queued work is work to come
            slot.handed_over(+1)
        # Work handed over by a save is one of its writers (`writers`): the save lands when they are done.
        step = phase_mod.step_of(phase_mod.foreground(where), "save") if writer else None
        ticket = WRITERS.handed(step) if step is not None else -1

        @functools.wraps(fn)
        def run(*args: Any, **kwargs: Any) -> Any:
            before = getattr(tracer.local, "phase", None)
            tracer.local.phase = where
            failed = True
            try:
                if step is not None:
                    WRITERS.starting(step, ticket)  # held there while the run holds its save's writers
                result = fn(*args, **kwargs)
                failed = False
                return result
            finally:
                tracer.local.phase = before
                if slot is not None:
                    slot.handed_over(-1)
                if step is not None:
                    WRITERS.finished(step, failed)

        return run

    submit = ThreadPoolExecutor.submit

    @functools.wraps(submit)
    def submit_in_phase(self: ThreadPoolExecutor, fn: Callable, /, *args: Any, **kwargs: Any) -> Any:
        return submit(self, handed_over(fn), *args, **kwargs)

    ThreadPoolExecutor.submit = submit_in_phase  # type: ignore[method-assign]

    start = threading.Thread.start

    @functools.wraps(start)
    def start_in_phase(self: threading.Thread) -> None:
        # A pool's worker thread outlives the save that started it: its tasks are the writers, not it.
        # A daemon thread is nothing the process waits for (tqdm's monitor, a watchdog): no writer either.
        writer = not self.daemon and getattr(self, "_target", None) is not pool_worker
        self.run = handed_over(self.run, writer)  # type: ignore[method-assign]
        start(self)

    threading.Thread.start = start_in_phase  # type: ignore[method-assign]


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
    where_group = _position(original, "group")
    where_timeout = _position(original, "timeout")

    @functools.wraps(original)
    def probe(*args: Any, **kwargs: Any) -> Any:
        if tracer.nested():
            return original(*args, **kwargs)
        with tracer.lock:
            tracer.collectives += 1
            number = tracer.collectives
        group = _argument(args, kwargs, "group", where_group)
        timeout = _argument(args, kwargs, "timeout", where_timeout)
        given = kwargs.get("group")  # as traced before positional groups were read: traces keep their shape
        named = {"group": given.group_name} if given is not None and hasattr(given, "group_name") else {}
        main = threading.current_thread() is threading.main_thread()
        if main:
            tracer.waiting = number
        slot = beacon.mine()

        def call(fault: Optional[Fault]) -> Any:
            if slot is not None:  # right before the call: a fault fired before it blocks short of it
                followed = _followed(name, group)
                slot.issue(followed, main, _gives_up_at(group, timeout), name, followed and _kinds_differ())
            return original(*args, **kwargs)

        try:
            result = tracer.operation("collective", name, call, op=name, n=number, at="enter", caller=caller(),
                                      **named)
        finally:
            if main:
                tracer.waiting = None
                if slot is not None:
                    slot.returned()
        tracer.emit("collective", op=name, n=number, at="exit")
        return result

    return probe


#: Collectives every rank of the group calls the same number of times (point-to-point ones not).
_SYMMETRIC = frozenset(COLLECTIVES) - {"send", "recv", "send_object_list", "recv_object_list"}


def _followed(name: str, group: Any) -> bool:
    """Does `launch.beacon` count this call: a collective of the default group."""
    if name not in _SYMMETRIC:
        return False
    if group is None:
        return True
    import torch.distributed as dist

    return group is dist.group.WORLD or group is dist.distributed_c10d._get_default_group()


def _kinds_differ() -> bool:
    """Does the default group's backend never match collectives of different
    kinds (`beacon.mismatched`): gloo alone (NCCL runs a barrier as an
    all-reduce, and a group of several backends is not claimed)."""
    import torch.distributed as dist

    try:
        return dist.get_backend() == "gloo"
    except Exception:  # noqa: BLE001 - no default group, or a torch that hides it: never claimed
        return False


def _position(fn: Callable, parameter: str) -> Optional[int]:
    """Where `parameter` sits among `fn`'s positional parameters (None: not one of them)."""
    import inspect

    try:
        names = list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return None
    return names.index(parameter) if parameter in names else None


def _argument(args: tuple, kwargs: dict, parameter: str, position: Optional[int]) -> Any:
    if parameter in kwargs:
        return kwargs[parameter]
    return args[position] if position is not None and position < len(args) else None


def _gives_up_at(group: Any, timeout: Any) -> float:
    """When this call gives up by itself: its own timeout (`monitored_barrier`), else its group's."""
    seconds = timeout.total_seconds() if timeout is not None else beacon.timeout_of(group)
    return time.monotonic() + seconds
