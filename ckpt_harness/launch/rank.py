"""The first moments of a rank: hygiene, logs, stacks on demand, the process group.

Everything here runs in the forked child before the entry point (the job
runner) gets control, and again after it returns: a rank reports "done" on
its status pipe and then parks until the harness tears the group down. A
rank, or a process it spawned that joined it (`link`), also reports there
when an injected fault is about to block it for good (`report_blocked`). A
rank that finished, or failed, keeps its sockets open the way a real
process would while its peers still work, so a peer blocked in a collective
stays blocked (as it would on NCCL) instead of being rescued by gloo's
"connection reset".
"""

from __future__ import annotations

import faulthandler
import importlib
import os
import signal
import sys
import traceback
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Optional

from ckpt_harness.launch import _proc, beacon, flight, looks
from ckpt_harness.launch.layout import mp_tempdir_path, warm_path

#: The signal the harness sends for an all-threads stack dump.
STACK_SIGNAL = signal.SIGUSR1


@dataclass(frozen=True)
class RankInfo:
    """What the launcher tells an entry point about its rank."""

    rank: int
    world_size: int
    local_rank: int
    node: int
    backend: str
    run_dir: str


def become_rank(spec: dict, request: dict, status_fd: int, zygote_pid: int) -> None:
    """Turn a freshly forked zygote child into rank `spec["rank"]`. Never returns."""
    code = 0
    try:
        os.setpgid(0, 0)
        _proc.die_with_parent(zygote_pid)
        # What a fresh interpreter starts with, whatever the zygote set: a
        # write to a closed pipe raises BrokenPipeError rather than killing
        # the rank (DCP's checkpoint process pipe, a logger's socket), and
        # SIGINT raises KeyboardInterrupt.
        for sig in (signal.SIGTERM, signal.SIGCHLD):
            signal.signal(sig, signal.SIG_DFL)
        signal.signal(signal.SIGPIPE, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _proc.redirect_output(spec["log"])
        faulthandler.enable(file=sys.stderr, all_threads=True)
        faulthandler.register(STACK_SIGNAL, file=sys.stderr, all_threads=True, chain=False)
        if request.get("warm_children"):  # before the first thread (the flight recorder's)
            from ckpt_harness.launch import warm

            warm.prepare(warm_path(request["run_dir"], spec["rank"]))
        flight.serve(spec["flight"])
        looks.serve(request["run_dir"], spec["rank"])
        os.environ.clear()
        os.environ.update(spec["env"])
        own_mp_tempdir(request["run_dir"], spec["rank"])
        flight.enable()
        # Exactly the harness's import path: the zygote's accumulates entries
        # from every earlier request (old pytester directories among them).
        sys.path[:] = request["sys_path"] + [p for p in sys.path if p not in request["sys_path"]]
        global _status_fd, _self
        _status_fd, _self = status_fd, (request["run_dir"], spec["rank"])
        beacon.start(request["run_dir"], spec["rank"])
        park(failed=not _run(spec, request))
    except BaseException:  # the launcher itself broke: say so in the log
        traceback.print_exc()
        code = 71
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def own_mp_tempdir(run_dir: str, rank: int) -> None:
    """Make this rank's multiprocessing temporary directory now, and name it in the run directory.

    Multiprocessing makes one (``pymp-*`` in the system's temporary directory, `util.get_temp_dir`) the
    first time a process needs it: DCP's checkpoint process is handed each save's tensors through a
    listener there. A process removes its own as its interpreter exits; a rank never exits so (it parks
    and is torn down by SIGKILL, or a fault kills it), so every run of DCP's process executor left one
    behind, a thousand in a matrix. So the launcher removes it after the teardown, from the path named
    here; made at the start, as a rank may die at any point after. What this changes for the code under
    test: the directory exists, empty, from the rank's start rather than from its first use. One the
    fork server made is not the rank's: a fresh interpreter starts without one."""
    from multiprocessing import process, util

    process.current_process()._config.pop("tempdir", None)  # type: ignore[attr-defined]
    mp_tempdir_path(run_dir, rank).write_text(util.get_temp_dir())


_status_fd: int | None = None
#: (run directory, rank) of this rank, for the children it links (`status_pipe`).
_self: Optional[tuple[str, int]] = None
#: Status bytes a rank writes: done, failed (then parked), blocked for good.
DONE, FAILED, BLOCKED = b"D", b"E", b"B"


def park(failed: bool = False) -> None:
    """Tell the harness this rank is finished, then wait to be torn down.

    An entry point may call it mid-run to stop exactly there, as a
    preemption would: the process stays put (sockets open, threads running)
    until the harness kills the group. Never returns.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    if _status_fd is None:
        raise RuntimeError("park() is only meaningful inside a rank started by ckpt_harness.launch")
    os.write(_status_fd, FAILED if failed else DONE)
    while True:
        signal.pause()


#: How a process another launcher started (a torchrun worker, `worker.py`) reports a block: it has no status pipe.
_on_blocked: Optional[Callable[[], None]] = None


def report_blocked_through(hook: Callable[[], None]) -> None:
    """Have `report_blocked` call `hook` (a torchrun worker's own record)."""
    global _on_blocked
    _on_blocked = hook


def report_blocked() -> None:
    """Tell the harness this process blocks for good from now on (an injected
    hang or freeze, right before it): the group's watch then gives its peers
    `GroupSpec.blocked_grace` from this moment, not from the group's start,
    so a run-up of any length (a checkpoint process to spawn, a cold cache)
    does not eat their budget. A no-op outside a rank the launcher started,
    or a process it spawned that joined it (`link.join_rank`).

    The watch's own channel (the record, the status pipe) hears it before the
    beacon does: a watch that proves the group stuck from the beacons then
    already knows the block, and names the cut it would have made (the
    blocked grace, not the deadline)."""
    if _on_blocked is not None:
        _on_blocked()
    if _status_fd is not None:
        try:
            os.write(_status_fd, BLOCKED)
        except OSError:  # the harness is already tearing the group down
            pass
    slot = beacon.mine()
    if slot is not None:
        slot.block()


def status_pipe() -> Optional[tuple[int, str, int]]:
    """(status pipe, run directory, rank) of this launched rank, for a
    process it spawns to join it (`link.link_for_child`); None elsewhere."""
    if _status_fd is None or _self is None:
        return None
    return (_status_fd, *_self)


def report_on(fd: int) -> None:
    """In a process a rank spawned (`link.join_rank`): report through the
    rank's status pipe `fd` from now on."""
    global _status_fd
    _status_fd = fd


def _run(spec: dict, request: dict) -> bool:
    """Join the process group and call the entry point; False if it raised."""
    import torch.distributed as dist

    info = RankInfo(
        rank=spec["rank"],
        world_size=request["world_size"],
        local_rank=spec["local_rank"],
        node=spec["node"],
        backend=request["backend"],
        run_dir=request["run_dir"],
    )
    try:
        entry = resolve(request["entry"])
        if info.backend == "nccl":
            import torch

            torch.cuda.set_device(info.local_rank)
        dist.init_process_group(
            backend=info.backend,
            store=dist.FileStore(request["store"], info.world_size),
            rank=info.rank,
            world_size=info.world_size,
            timeout=timedelta(seconds=request["pg_timeout"]),
        )
        entry(info, request["payload"])
        return True
    except BaseException:  # CheckpointException derives from BaseException
        print(f"[ckpt_harness] rank {info.rank} failed:", file=sys.stderr)
        traceback.print_exc()
        return False
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def resolve(ref: str) -> Any:
    """The function a "module:function" reference names (imported if need be)."""
    module, _, name = ref.partition(":")
    return getattr(importlib.import_module(module), name)
