"""The bootstrap of a script-mode worker: torchrun runs it, it runs the script.

The elastic agent starts every worker as ``python -u -m
ckpt_harness.launch.worker train.py args...``. Before the script gets
control the bootstrap gives the worker what `rank.py` gives a Job rank:

* a log of its own (``rank{R}.log``, appended across restarts), where
  torchrun would have interleaved every worker on the agent's console;
* an all-threads stack on `STACK_SIGNAL` and, on the agent's SIGTERM, just
  before it dies, both into ``rank{R}.stack``: where a hung worker waits,
  and where a peer was when the agent stopped it after a failure;
* torch's flight recorder on and its dump on `flight.DUMP_SIGNAL`;
* the kernel's parent-death signal tied to the agent, which starts workers
  in their own sessions and so, SIGKILLed, would leave them behind;
* a record (`WorkerRecord`) the harness reads: which pid is which global
  rank in which attempt, whether the script returned or raised, which an
  exit code cannot tell apart from a crash, and when an injected fault
  blocked it for good (what a Job rank tells through its status pipe);
* a beacon (`launch.beacon`): the collective its main thread waits in,
  read by the harness's watch to end a run that can no longer progress;
  and a thread that answers the watch's looks (`launch.looks`): what its
  process groups wait in by their own sequence numbers, DDP's buckets too.

Then the script runs as ``python train.py args...`` would run it:
``sys.argv``, ``sys.path[0]`` and ``__main__`` are the script's, with
``{local_rank}`` in an argument replaced by the worker's local rank: a
command is the same for every worker under torchrun, and DeepSpeed's
launcher gives each worker its own ``--local_rank=N``, which scripts
written for it parse.

A worker whose script returned is held until every worker of its attempt
has ended (`_hold`), its process group kept: a peer left waiting in a
collective it skipped waits, the hang it is on NCCL, where gloo would
tell the peer its connection closed. For the same reason a destroy of the
default group is carried out only then (`_defer_destroy`). Job mode parks
a finished rank the same way.
"""

from __future__ import annotations

import dataclasses
import faulthandler
import json
import os
import runpy
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable, Optional

from ckpt_harness.launch import _proc, beacon, flight, looks
from ckpt_harness.launch.layout import (
    flight_path,
    log_path,
    stack_path,
    worker_record_path,
    worker_record_paths,
)
from ckpt_harness.launch.rank import STACK_SIGNAL, report_blocked_through, resolve

#: Where a script's command takes the worker's local rank (put in place in `main`).
LOCAL_RANK = "{local_rank}"
#: Set by the harness in every agent's environment, inherited by the workers
#: and anything they start: teardown finds every process of a run by it.
RUN_TAG_ENV = "CKPT_HARNESS_ELASTIC_RUN"
RUN_DIR_ENV = "CKPT_HARNESS_RUN_DIR"
#: Seconds for torch.distributed's default process-group timeout (see `_default_timeouts`).
PG_TIMEOUT_ENV = "CKPT_HARNESS_PG_TIMEOUT"
#: `ScriptSpec.entry`, "module:function": what arms the worker before its script runs.
ENTRY_ENV = "CKPT_HARNESS_WORKER_ENTRY"
#: How often a worker whose script returned looks whether every worker has ended (`_hold`).
HOLD_POLL = 0.05
#: In the command line of every agent (a fork of the agent server keeps the server's).
AGENT_MODULE = b"ckpt_harness.launch.agent"


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """A worker's place in the group, as torchrun's environment gives it."""

    rank: int
    local_rank: int
    #: The agent's rank among the agents (c10d assigns it in join order,
    #: whatever ``--node-rank`` said).
    group_rank: int
    world_size: int
    local_world_size: int
    #: How often this worker's agent restarted its group before this attempt.
    restart: int
    max_restarts: int
    run_dir: Path

    @classmethod
    def from_env(cls) -> "WorkerInfo":
        env = os.environ
        return cls(
            rank=int(env["RANK"]), local_rank=int(env["LOCAL_RANK"]), group_rank=int(env["GROUP_RANK"]),
            world_size=int(env["WORLD_SIZE"]), local_world_size=int(env["LOCAL_WORLD_SIZE"]),
            restart=int(env.get("TORCHELASTIC_RESTART_COUNT", "0")),
            max_restarts=int(env.get("TORCHELASTIC_MAX_RESTARTS", "0")),
            run_dir=Path(env[RUN_DIR_ENV]),
        )


@dataclasses.dataclass(frozen=True)
class WorkerRecord:
    """One worker process, written when it starts and again when the script ends.

    Named by pid, so the attempts of a restarted group sit side by side and
    the harness takes, per rank, the one that started last.
    """

    rank: int
    pid: int
    restart: int
    max_restarts: int
    #: `time.monotonic()` (one clock for every process of the machine).
    started: float
    #: "ok" (returned, or exited with status 0), "raised" (an exception or a
    #: non-zero `sys.exit`), "stopped" (parked where a preempted run stops,
    #: see `rankside.script`), None while the script runs or if the process died.
    end: Optional[str] = None
    exit_code: Optional[int] = None
    finished: Optional[float] = None
    #: When an injected fault blocked it for good (`rank.report_blocked`): its
    #: peers' grace counts from here (`ScriptSpec.blocked_grace`).
    blocked: Optional[float] = None

    def write(self, run_dir: Path) -> None:
        path = worker_record_path(run_dir, self.pid)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(dataclasses.asdict(self)))
        os.replace(tmp, path)  # the harness never reads half a record

    @classmethod
    def newest(cls, run_dir: Path) -> dict[int, "WorkerRecord"]:
        """Each rank's worker that started last: the attempt now (or last) running."""
        newest: dict[int, WorkerRecord] = {}
        for r in cls.read_all(run_dir):
            if r.rank not in newest or r.started > newest[r.rank].started:
                newest[r.rank] = r
        return newest

    @classmethod
    def read_all(cls, run_dir: Path) -> list["WorkerRecord"]:
        records = []
        for path in worker_record_paths(run_dir):
            try:
                records.append(cls(**json.loads(path.read_text())))
            except (OSError, ValueError, TypeError):  # replaced while listed
                continue
        return records


def prepare(worker: WorkerInfo, park: Callable[[], None]) -> Optional[Any]:
    """Arm the worker just before the script runs, with the entry the harness
    named (`ScriptSpec.entry`): named by string, as a Job rank's entry is, so
    that the launcher needs nothing of what the harness records.

    Returns what to tell when the script ends (its `finished()` and
    `failed(exc)`), or None. It runs after the process is set up (logs,
    stacks, flight recorder) and before any of the script's code. `park`
    stops the worker where it is, for good (a preemption).
    """
    ref = os.environ.get(ENTRY_ENV)
    if not ref:
        return None
    return resolve(ref)(worker.rank, worker.run_dir, park)


def main(argv: list[str]) -> None:
    if not argv or argv[:1] == ["-m"] and len(argv) < 2:
        sys.exit("usage: python -m ckpt_harness.launch.worker SCRIPT|-m MODULE [ARGS...]")
    script, *args = argv
    worker = WorkerInfo.from_env()
    args = [a.replace(LOCAL_RANK, str(worker.local_rank)) for a in args]
    _die_with_agent()
    run_dir = worker.run_dir
    _proc.redirect_output(log_path(run_dir, worker.rank))
    print(f"[ckpt_harness] rank {worker.rank} (pid {os.getpid()}, restart {worker.restart}): "
          f"{' '.join([script, *args])}", file=sys.stderr)
    faulthandler.enable(file=sys.stderr, all_threads=True)
    # This attempt's stacks only; O_APPEND, as the harness reads on from an offset.
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    stacks = os.fdopen(os.open(stack_path(run_dir, worker.rank), flags, 0o644), "w")
    faulthandler.register(STACK_SIGNAL, file=stacks, all_threads=True, chain=False)
    # chain: after the dump the default action ends the process, as without it.
    faulthandler.register(signal.SIGTERM, file=stacks, all_threads=True, chain=True)
    flight.serve(str(flight_path(run_dir, worker.rank)))
    looks.serve(run_dir, worker.rank)
    flight.enable()
    record = WorkerRecord(rank=worker.rank, pid=os.getpid(), restart=worker.restart,
                          max_restarts=worker.max_restarts, started=time.monotonic())
    record.write(run_dir)
    report_blocked_through(lambda: dataclasses.replace(record, blocked=time.monotonic()).write(run_dir))
    _default_timeouts()

    def park() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        dataclasses.replace(record, end="stopped", finished=time.monotonic()).write(run_dir)
        while True:
            signal.pause()

    beacon.start(run_dir, worker.rank)
    armed = prepare(worker, park)
    run = _runner(script, args)
    end, code = "raised", 1
    try:
        run()
        end, code = "ok", 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        end = "ok" if code == 0 else "raised"
        if armed is not None:
            armed.finished() if code == 0 else armed.failed(exc)
        raise
    except BaseException as exc:
        if armed is not None:
            armed.failed(exc)
        raise
    else:
        if armed is not None:
            armed.finished()
    finally:  # the exception, if any, goes on to Python's own handler: traceback, exit 1
        sys.stdout.flush()
        sys.stderr.flush()
        dataclasses.replace(record, end=end, exit_code=code, finished=time.monotonic()).write(run_dir)
        if end == "ok":
            _hold(worker)


def _hold(worker: WorkerInfo) -> None:
    """Wait until every worker of this attempt has ended (returned, raised,
    stopped or died); then carry out a destroy the script asked for. A
    rank's worker in this attempt is its newest: across nodes the restart
    counts differ (only the agent that saw a failure counts it), and every
    peer this worker ran with has started by now."""
    while True:
        newest = WorkerRecord.newest(worker.run_dir)
        if len(newest) == worker.world_size and all(r.end is not None or not _proc.alive(r.pid)
                                                    for r in newest.values()):
            break
        time.sleep(HOLD_POLL)
    _carry_out()


#: The real destroy of the default group, once the script asked for it (`_defer_destroy`).
_deferred: Optional[Callable[[], None]] = None


def _carry_out() -> None:
    global _deferred
    if _deferred is not None:
        destroy, _deferred = _deferred, None
        destroy()


def _defer_destroy() -> None:
    """Keep the default group's connections until every worker ended.

    On gloo, destroying a group closes its connections, and a peer waiting
    in a collective on it raises "Connection closed by peer"; on NCCL it
    waits, hung. So the script's `destroy_process_group()` of the default
    group is carried out when the worker is released (`_hold`), or at once
    should the script start a group again; another group's goes through.
    What this changes is in docs/probes.md."""
    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    destroy, init = c10d.destroy_process_group, c10d.init_process_group

    def destroy_process_group(group: Any = None) -> None:
        global _deferred
        if group is not None and group is not c10d.GroupMember.WORLD:
            return destroy(group)
        if c10d.is_initialized():
            _deferred = destroy
        return None

    def init_process_group(*args: Any, **kwargs: Any) -> Any:
        _carry_out()
        return init(*args, **kwargs)

    for module in (dist, c10d):
        module.destroy_process_group = destroy_process_group
        module.init_process_group = init_process_group


def _runner(script: str, args: list[str]) -> Callable[[], Any]:
    """Run the script as ``python SCRIPT ARGS`` or ``python -m MODULE ARGS``
    would: `sys.argv` and `sys.path[0]` as Python sets them."""
    if script == "-m":
        module, *args = args
        sys.argv = [module, *args]  # run_module puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        return lambda: runpy.run_module(module, run_name="__main__", alter_sys=True)
    sys.argv = [script, *args]
    sys.path[0] = os.path.dirname(os.path.abspath(script))
    return lambda: runpy.run_path(script, run_name="__main__")


def _die_with_agent() -> None:
    """SIGKILL this worker when its agent dies.

    The agent spawns its workers from its main thread (`_invoke_run`, also
    on restarts), so the parent-death signal, which follows the thread that
    forked, fires only when the agent process ends. A worker whose agent
    died before the prctl has already been handed to another parent, one
    that is not a fork of the harness's agent server (`agent.py`), and the
    worker leaves.
    """
    parent = os.getppid()
    _proc.die_with_parent(parent)
    try:
        with open(f"/proc/{parent}/cmdline", "rb") as f:
            orphaned = AGENT_MODULE not in f.read().split(b"\0")
    except OSError:
        orphaned = True
    if orphaned:
        os._exit(70)


def _default_timeouts() -> None:
    """Bound the collectives of a script that sets no timeout of its own
    (and keep its default group until every worker ended: `_defer_destroy`).

    torch.distributed waits 30 minutes by default (gloo; 10 for NCCL), and
    an unmodified script rarely passes ``timeout=`` to
    `init_process_group`. `_get_default_timeout` reads these module globals
    when the call is made, so setting them here reaches every process group
    the script creates without a timeout. A script's explicit ``timeout=``
    wins and is out of the harness's hands, as is the TCPStore's connect
    timeout (bound when torch is imported); the harness's deadline stops
    such a worker anyway, this only keeps a lost one from lingering.
    """
    seconds = os.environ.get(PG_TIMEOUT_ENV)
    if not seconds:
        return
    try:
        from datetime import timedelta

        import torch.distributed.distributed_c10d as c10d
    except ImportError:  # a script without torch: nothing to bound
        return
    c10d.default_pg_timeout = timedelta(seconds=float(seconds))
    c10d.default_pg_nccl_timeout = timedelta(seconds=float(seconds))
    _defer_destroy()


if __name__ == "__main__":
    main(sys.argv[1:])
