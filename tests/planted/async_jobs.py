"""Planted async-checkpointing jobs: the built-in `dcp_async` with one bug each.

A separate module so that `jobs.py` does not pay for importing DCP and FSDP.
"""

from __future__ import annotations

import dataclasses
import shutil
import sys
import threading
import time
from pathlib import Path

import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import DefaultSavePlanner, FileSystemWriter
from torch.distributed.checkpoint.staging import AsyncStager

from ckpt_harness import RankContext
from ckpt_harness.job import Job
from ckpt_harness.jobs._common import commit, prepare_step_dir, step_dir
from ckpt_harness.jobs.dcp_async import DcpAsyncJob, DcpAsyncProcessJob


class PublishesOnlyAtNextSave(DcpAsyncJob):
    """Publishes a background save only when the next save starts, and hides
    that from the harness (no `wait_for_saves`): the last checkpoint is never
    published, and a preemption right after save k leaves `latest` at the
    save before."""

    wait_for_saves = Job.wait_for_saves

    def save(self, ctx: RankContext, step: int) -> None:
        DcpAsyncJob.wait_for_saves(self, ctx)
        super().save(ctx, step)


# -- one bug of async checkpointing each (issue 11); `dcp_async` is the correct variant ------
class _NoStaging(AsyncStager):
    """Hands `dcp.save` the live state dict: no copy (pytorch#144657)."""

    _synchronize_after_execute = False

    def stage(self, state_dict):
        return state_dict


class _SlowDisk(FileSystemWriter):
    """A writer that starts writing only once `go` is set: storage slow
    enough that training runs its next step first, every time."""

    def __init__(self, path, go: threading.Event):
        super().__init__(path)
        self.go = go

    def write_data(self, plan, planner):
        self.go.wait(timeout=60)
        return super().write_data(plan, planner)


class _OnSlowDisk(DcpAsyncJob):
    """Its background writer waits for the slow storage (`_SlowDisk`) until
    training has run its next step."""

    def setup(self, ctx: RankContext) -> None:
        super().setup(ctx)
        self._go = threading.Event()
        self._go.set()

    def train_step(self, ctx: RankContext, step: int) -> float:
        loss = super().train_step(ctx, step)
        self._go.set()
        return loss

    def _start(self, ctx: RankContext, step: int, **how) -> Path:
        self.wait_for_saves(ctx)
        path = step_dir(ctx.ckpt_dir, step)
        prepare_step_dir(ctx, path)
        self._go.clear()
        future = dcp.async_save(self._payload(ctx, step), storage_writer=_SlowDisk(path, self._go),
                                process_group=self._group, **how)
        self._pending = (step, path, future)
        return path


class SkipsStaging(_OnSlowDisk):
    """Writes the live tensors in the background: the optimizer step after
    `async_save` returned changes them in place before they reach the disk,
    so save k persists a later state than the one it returned with."""

    def save(self, ctx: RankContext, step: int) -> None:
        self._start(ctx, step, async_stager=_NoStaging())

    def wait_for_saves(self, ctx: RankContext) -> None:
        self._go.set()
        super().wait_for_saves(ctx)


class HandsLiveTensors(DcpAsyncJob):
    """`async_save` with a stager that copies nothing (pytorch#144657): its
    writer serializes the live tensors. Where the writer beats the next
    optimizer step (a tiny model on a fast disk) the checkpoint is right by
    luck; once training overlaps the write, it holds a later step's weights
    and optimizer moments beside the save's step: a torn snapshot."""

    def save(self, ctx: RankContext, step: int) -> None:
        self.wait_for_saves(ctx)
        path = step_dir(ctx.ckpt_dir, step)
        prepare_step_dir(ctx, path)
        future = dcp.async_save(self._payload(ctx, step), checkpoint_id=path, process_group=self._group,
                                async_stager=_NoStaging())
        self._pending = (step, path, future)


class SwallowsBackgroundFailure(DcpAsyncJob):
    """A failed background write is logged and forgotten (OLMo-core #831): the
    save is published as if it had landed."""

    def wait_for_saves(self, ctx: RankContext) -> None:
        if self._pending is None:
            return
        step, path, future = self._pending
        self._pending = None
        try:
            future.result()
        except BaseException as exc:  # noqa: BLE001 - the bug (DCP raises CheckpointException, a BaseException)
            print(f"background save {step} failed, carrying on: {exc}")
        commit(ctx, path, step, sync_files=True)
        ctx.published(step)


class PublishesBeforeDurable(_OnSlowDisk):
    """Moves `latest` (and rotates) as soon as `async_save` returned, before
    the background writer has written anything (KempnerForge#102). Its disk
    is slow until then: on a loaded box the writer could otherwise reach its
    last rename before the main thread moved `latest`, and the bug would
    hide in that case (a crash there resumed the save before, correctly)."""

    def save(self, ctx: RankContext, step: int) -> None:
        path = self._start(ctx, step)
        commit(ctx, path, step)
        self._go.set()

    def wait_for_saves(self, ctx: RankContext) -> None:
        if self._pending is not None:
            _, _, future = self._pending
            self._pending = None
            future.result()


class PurgesAtReturn(DcpAsyncJob):
    """Rotates out old checkpoints as soon as `async_save` returned, while
    the new one is still being written; `latest` waits for it, correctly.
    torchtitan purges at that moment too, which is why it keeps at least two
    (KempnerForge#102's other half): with keep_last=1, a crash of the writer
    leaves `latest` naming a deleted step."""

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if ctx.rank == 0 and ctx.keep_last is not None:  # the newest keep_last, the one in flight among them
            for old in sorted(Path(ctx.ckpt_dir).glob("step_*"))[:-ctx.keep_last]:  # zero-padded: by step
                shutil.rmtree(old)
        dist.barrier()


class _LateOnRank0(DefaultSavePlanner):
    """Rank 0's background save reaches its first collective late."""

    def create_local_plan(self):
        if dist.get_rank() == 0:
            time.sleep(1.0)
        return super().create_local_plan()


class SharesTrainingGroup(DcpAsyncJob):
    """Runs the background save's collectives on the training (default)
    process group while the main thread runs a barrier on it
    (KempnerForge#104). Rank 0's writer and rank 1's main thread are made
    late, so rank 0 enters the barrier first and rank 1 the writer's
    collective first: the two never match."""

    def save(self, ctx: RankContext, step: int) -> None:
        self.wait_for_saves(ctx)
        path = step_dir(ctx.ckpt_dir, step)
        prepare_step_dir(ctx, path)
        future = dcp.async_save(self._payload(ctx, step), checkpoint_id=path, planner=_LateOnRank0())
        self._pending = (step, path, future)
        if ctx.rank == 1:
            time.sleep(1.0)
        dist.barrier()


class ClaimsPublishedAtReturn(_OnSlowDisk):
    """Points `latest` at a save and says it is published (`ctx.published`) as
    soon as `async_save` returned, while its writer still waits for slow
    storage (it writes once training ran its next step). A graceful stop
    lets the write land; a hard stop right after the save leaves `latest`
    naming a step with no file in it: a save claimed published, lost."""

    def save(self, ctx: RankContext, step: int) -> None:
        path = self._start(ctx, step)
        commit(ctx, path, step)
        ctx.published(step)

    def wait_for_saves(self, ctx: RankContext) -> None:
        self._go.set()
        if self._pending is not None:
            _, _, future = self._pending
            self._pending = None
            future.result()


class SwallowsChildFailure(DcpAsyncProcessJob):
    """`SwallowsBackgroundFailure` with DCP's process executor: the checkpoint
    process died mid-save ("Checkpoint background process is dead"), and
    the job publishes the save anyway."""

    wait_for_saves = SwallowsBackgroundFailure.wait_for_saves


class RotatesByName(DcpAsyncJob):
    """Names its step directories `step_<n>` unpadded and, as it publishes a
    save, keeps the newest keep_last by name: from the tenth step on,
    "step_10" sorts before "step_8" and a newer checkpoint is deleted."""

    def save(self, ctx: RankContext, step: int) -> None:
        self.wait_for_saves(ctx)
        path = Path(ctx.ckpt_dir) / f"step_{step}"
        prepare_step_dir(ctx, path)
        future = dcp.async_save(self._payload(ctx, step), checkpoint_id=path,
                                process_group=self._group, async_checkpointer_type=self.executor)
        self._pending = (step, path, future)

    def wait_for_saves(self, ctx: RankContext) -> None:
        if self._pending is None:
            return
        step, path, future = self._pending
        self._pending = None
        future.result()
        commit(dataclasses.replace(ctx, keep_last=None), path, step, sync_files=True)
        if ctx.rank == 0 and ctx.keep_last is not None:
            for old in sorted(Path(ctx.ckpt_dir).glob("step_*"))[:-ctx.keep_last]:
                shutil.rmtree(old)
        dist.barrier()
        ctx.published(step)


class _Witness(FileSystemWriter):
    """A writer that, where it runs (the checkpoint process), writes down how
    that process started: its parent, its process group, the environment it
    was given, its working directory."""

    def __init__(self, path, witness: Path):
        super().__init__(path)
        self.witness = witness

    def prepare_local_plan(self, plan):
        import json
        import os

        self.witness.mkdir(parents=True, exist_ok=True)
        facts = {"pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgid(0), "cwd": os.getcwd(),
                 "at_save": os.environ.get("WITNESS_AT_SAVE"), "argv": sys.argv}
        (self.witness / f"{os.getpid()}.json").write_text(json.dumps(facts))
        return super().prepare_local_plan(plan)


class WitnessesItsCheckpointProcess(DcpAsyncProcessJob):
    """`dcp_async_process` whose checkpoint process writes down how it
    started (`_Witness`, next to the checkpoint directory); the rank sets
    WITNESS_AT_SAVE to the step just before each save, long after it
    started: a spawned process gets the environment of the spawn."""

    def save(self, ctx: RankContext, step: int) -> None:
        import os

        os.environ["WITNESS_AT_SAVE"] = str(step)
        self.wait_for_saves(ctx)
        path = step_dir(ctx.ckpt_dir, step)
        prepare_step_dir(ctx, path)
        writer = _Witness(path, Path(ctx.ckpt_dir).parent / "witness" / f"rank{ctx.rank}")
        future = dcp.async_save(self._payload(ctx, step), checkpoint_id=path, storage_writer=writer,
                                process_group=self._group, async_checkpointer_type=self.executor)
        self._pending = (step, path, future)
