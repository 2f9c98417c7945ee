"""The `dcp` job saved in the background: `torch.distributed.checkpoint.async_save`,
the way large trainers checkpoint (torchtitan, Megatron-Core, NeMo, OLMo-core).

Model, data, layout and loading are the `dcp` job's; only the save differs.
Two jobs, one per executor DCP ships (torch 2.13 picks it with
`async_checkpointer_type`):

- `dcp_async`: THREAD, a one-thread pool in the rank writes the shards;
- `dcp_async_process`: PROCESS, one long-lived checkpoint process per rank
  (spawned at the first save, with its own gloo group over a TCPStore rank 0
  hosts) writes them; the rank only pickles the staged state dict to it.

Both hand `async_save` a process group of their own, a gloo `new_group`
built in `setup` as torchtitan builds it: the background save's collectives
must not queue behind the training's on the default group (KempnerForge#104:
they did, and deadlocked with a main-thread barrier). The PROCESS executor
uses it only to agree on its store's address; its writes' collectives run on
the checkpoint processes' own group.

What a save promises, and when (what the harness records and judges):

- *returned*: `save(k)` returns once `async_save` returned. DCP's default
  stager has copied every tensor to CPU by then (staging is synchronous), so
  the state the harness records at that moment is the one save k persists;
  training goes on while the background writes it.
- *saved*: the checkpoint counts as saved when its future completed without
  error on every rank (then DCP's coordinator has gathered every rank's
  write results and written `.metadata`).
- *published*: the job waits for the previous save's future at the start
  of the next save, and before it finishes (`wait_for_saves`, which the
  harness calls at the end of training and before a stop after save k
  parks the rank). Only then, as torchtitan's `maybe_wait_for_saving`,
  and only after rank 0 made every file of the step durable (fsynced, as
  the `dcp` job's commit does) does `latest` move to it and are old steps
  rotated out (`keep_last`): the pointer and the deletions never run ahead
  of the data (KempnerForge#102). torchtitan itself has no pointer (a step
  directory with a `.metadata` is a checkpoint) and purges as soon as
  `async_save` returned, keeping at least two for that reason.

So between save k returning and save k+1 (or the end) `latest` still names
the save before k. A crash in that window resumes k-1 by design: the job
reports the moment it published k (`ctx.published`), and the oracle accepts
the save before only for faults before it (`oracle.properties.Background`).

Where the background save shows up in the harness (details in NOTES-issue11.md):

- THREAD: the worker thread is in the rank process, so the file probes
  (`inject/files.py` wraps `open`, `os.write`, `os.fsync`, ... process-wide)
  and the collective probes (`torch.distributed.*` module attributes, which
  DCP's `_DistWrapper` calls) see its operations, and the runner gives work
  handed to a thread the phase `bg_save k` (`probes.follow_threads`): its
  points are numbered in the order the writer performs them, whatever the
  main thread does meanwhile, and faults fire there while training goes on.
- PROCESS: the checkpoint process is spawned (a fresh interpreter, not a
  fork of the probed rank). The runner has every checkpoint process DCP
  spawns start with the rank's probes (`inject.dcp_process`): its file
  operations and collectives are points of `bg_save k` too, each event
  naming the process, merged into its rank's events; faults fire there (a
  crash kills the checkpoint process, and the rank learns of it when it
  waits for the save); its bytes are logged for the power-loss model. Its
  gloo group gets the rank's collective timeout. It is in the rank's
  process group, so tearing the group down kills it with its rank.
"""

from __future__ import annotations

import contextlib
import os
from concurrent.futures import Future
from datetime import timedelta
from pathlib import Path
from typing import ClassVar, Optional

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType

from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import commit, prepare_step_dir, step_dir
from ckpt_harness.jobs._store import root
from ckpt_harness.jobs.dcp import DcpJob, checkpoint_id


class DcpAsyncJob(DcpJob):
    """FSDP2 over gloo, saved with `dcp.async_save` (thread executor) on a
    checkpoint process group of its own; `latest` follows completed saves."""

    executor: ClassVar[AsyncCheckpointerType] = AsyncCheckpointerType.THREAD
    preload = (*DcpJob.preload, "torch.distributed.checkpoint._async_thread_executor", __name__)

    _group: Optional[dist.ProcessGroup] = None
    #: The save in flight: (step, its directory, its future).
    _pending: Optional[tuple[int, Path, Future]] = None

    def setup(self, ctx: RankContext) -> None:
        super().setup(ctx)
        # The warm-up template runs setup on torch's fake group, where no gloo
        # group can be built; it never saves.
        if dist.get_backend() != "fake":
            self._group = dist.new_group(backend="gloo", timeout=_default_timeout())
        self._pending = None

    def save(self, ctx: RankContext, step: int) -> None:
        self.wait_for_saves(ctx)
        path = step_dir(root(ctx), step)
        prepare_step_dir(ctx, path)
        future = dcp.async_save(self._payload(ctx, step), checkpoint_id=checkpoint_id(path),
                                process_group=self._group, async_checkpointer_type=self.executor)
        self._pending = (step, path, future)

    def wait_for_saves(self, ctx: RankContext) -> None:
        """Wait for the save in flight, then publish it: fsync its files, point
        `latest` at it, rotate. A failed background save raises here, on
        every rank (DCP gathers write errors to all of them)."""
        if self._pending is None:
            return
        step, path, future = self._pending
        self._pending = None
        future.result()
        commit(ctx, path, step, sync_files=True)
        ctx.published(step)

    def teardown(self, ctx: RankContext) -> None:
        super().teardown(ctx)
        if self._group is not None:
            dist.destroy_process_group(self._group)
            self._group = None


def _default_timeout() -> timedelta:
    """The default group's collective timeout: the harness sets it so that a
    rank whose peer died fails in time. A new group would get gloo's 30 min."""
    default = dist.distributed_c10d._get_default_group()
    return default._get_backend(torch.device("cpu")).options._timeout


#: Seconds a checkpoint process is given to leave on its own at teardown.
_STOP_GRACE = 2.0


class DcpAsyncProcessJob(DcpAsyncJob):
    """`dcp_async` with DCP's process executor: one checkpoint process per rank.

    The checkpoint processes meet over a store rank 0 hosts for the whole
    run (`DCP_USE_PREFIX_STORE=1`), as they meet over torchrun's store in a
    real job (there the agent hosts it). They use it only to start, at the
    first save; then gloo's own connections carry their collectives, so a
    rank 0 frozen later leaves their store alone. DCP's default picks a free
    port, releases it, and has the checkpoint process bind it seconds later:
    runs sharing a host (the harness runs cases side by side) race for it,
    and the loser's every save fails (EADDRINUSE) before any fault fires.
    """

    executor = AsyncCheckpointerType.PROCESS
    preload = (*DcpJob.preload, "torch.distributed.checkpoint._async_process_executor", __name__)

    _store: Optional[dist.TCPStore] = None

    def setup(self, ctx: RankContext) -> None:
        super().setup(ctx)
        if self._group is None:  # the warm-up template: no save, no store
            return
        if ctx.rank == 0:
            self._store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
        port = [self._store.port if self._store is not None else None]
        dist.broadcast_object_list(port, src=0, group=self._group)
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port[0]), DCP_USE_PREFIX_STORE="1")

    def teardown(self, ctx: RankContext) -> None:
        """Stop the checkpoint process now rather than at interpreter exit,
        which a rank never reaches (it parks and is killed with its group).

        Every save was waited for, so nothing is lost by killing it: ask it
        to stop, kill it if it has not within `_STOP_GRACE`, then reap it.
        DCP's own `__del__` (TERMINATE, 5 s, SIGTERM) leaves a dying process
        that the object's second `__del__`, at garbage collection, writes
        to: a broken pipe.
        """
        from torch.distributed.checkpoint import _async_process_executor as executor

        process, executor._CHECKPOINT_PROCESS = executor._CHECKPOINT_PROCESS, None
        if process is not None:
            child = process._save_process
            if child.is_alive():
                with contextlib.suppress(OSError):  # it may have died since
                    process._send(executor._CheckpointSaveProcessControlOpts.TERMINATE)
                child.join(timeout=_STOP_GRACE)
            if child.is_alive():
                child.kill()
            child.join()
        self._store = None
        super().teardown(ctx)
