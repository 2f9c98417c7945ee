"""Jobs for the catalogue's own checks: each passes or ships one bug that
exactly one scenario check must flag (overwrite, world-size change, final
save stall, simulated multi-node).

The overwrite and reshard ones build on the built-in `torch_save` job (a
`latest` pointer; a step directory nobody points to is not discovered), so
the save really lands in the pre-populated directory; the stall and node
ones on the reference checkpointer of `checkpointers.py`.
"""

from __future__ import annotations

import datetime
import errno
import time
from pathlib import Path

import torch.distributed as dist

from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import prepare_step_dir
from ckpt_harness.jobs.torch_save import TorchSaveJob
from tests.planted.checkpointers import ReferenceCheckpointer, everywhere


class MergesIntoExisting(TorchSaveJob):
    """Saves into the step directory as found (`mkdir(exist_ok=True)`).

    Flagged as not **overwrite-safe** by overwrite-larger-world: the shards
    of an earlier run with more ranks stay beside the new files, where a
    loader globbing `rng_rank*.pt` would pick them up.
    """

    def _prepare_step_dir(self, ctx: RankContext, path: Path) -> None:
        dist.barrier()
        if ctx.rank == 0:
            path.mkdir(parents=True, exist_ok=True)
        dist.barrier()


class IgnoresOverwrite(TorchSaveJob):
    """Refuses (on every rank, before touching anything) to save into an
    existing step directory, whatever `ctx.overwrite` says.

    Flagged as not **overwrite-safe** by overwrite-complete with overwrite on.
    """

    def _prepare_step_dir(self, ctx: RankContext, path: Path) -> None:
        if path.exists():
            raise FileExistsError(errno.EEXIST, "checkpoint directory exists", str(path))
        prepare_step_dir(ctx, path)


class RefusesAfterDeleting(TorchSaveJob):
    """Empties an existing step directory, then refuses to save into it.

    Flagged as not **overwrite-safe**: a refusal must leave the directory
    as it was.
    """

    def _prepare_step_dir(self, ctx: RankContext, path: Path) -> None:
        if path.exists():
            dist.barrier()
            if ctx.rank == 0:
                for f in path.iterdir():
                    f.unlink()
            dist.barrier()
            raise FileExistsError(errno.EEXIST, "checkpoint directory exists", str(path))
        prepare_step_dir(ctx, path)


class ReshardForgetsOptimizer(TorchSaveJob):
    """torch_save's world-size change, except that it drops the optimizer
    moments when the world size changed ("they were sharded anyway").

    Flagged as not **reshardable**: `full_state` after the resume at M lacks
    the `optim/` keys saved at N.
    """

    def _load(self, ctx: RankContext):
        step = super()._load(ctx)
        if self.resharded:
            self.optimizer.state.clear()
        return step


class TimedBarrier(ReferenceCheckpointer):
    """The reference, whose save starts with a barrier on a group that times
    out after `timeout` seconds instead of the process group's default.

    Passes final-save-blocked: a rank that never arrives makes its peers
    raise. Passes final-save-late while the late rank is within `timeout`.
    (`monitored_barrier` would not do: it times out on rank 0 only, and a
    missing rank 0 leaves the others waiting.)
    """

    timeout = 3.0

    def setup(self, ctx: RankContext) -> None:
        super().setup(ctx)
        self.save_group = dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=self.timeout))

    def _make_dir(self, ctx: RankContext, path: Path) -> None:
        dist.barrier(group=self.save_group)
        everywhere(ctx, lambda: self._prepare(ctx, path) if ctx.rank == 0 else None)


class _SlowStart:
    """Takes `RUN_UP` seconds to start, as a job that spawns a checkpoint
    process per rank or reads a cold cache does: longer than the blocked
    grace the stall tests give, so a budget counted from the group's start
    would cut the run before its final save."""

    RUN_UP = 4.0

    def setup(self, ctx: RankContext) -> None:
        super().setup(ctx)
        time.sleep(self.RUN_UP)


class SlowTimedBarrier(_SlowStart, TimedBarrier):
    """TimedBarrier with a slow start and a 1 s barrier: passes final-save-blocked."""

    timeout = 1.0


class SlowReference(_SlowStart, ReferenceCheckpointer):
    """The reference with a slow start: its peers wait forever for a blocked rank (flagged, not undecided)."""


class ImpatientBarrier(TimedBarrier):
    """TimedBarrier with a timeout shorter than an ordinary late rank.

    Flagged as not **skew-safe** by final-save-late (2 s): a rank that is
    merely slow fails the save.
    """

    timeout = 0.75


class NodeLocalRankZeroCommits(ReferenceCheckpointer):
    """The reference, committing on every node's LOCAL_RANK 0 instead of on
    global rank 0: correct on one node, where they are the same rank.

    Flagged by multi-node-skew: with two simulated nodes both node leaders
    rename `tmp.step_N` into place, and the second finds it gone.
    """

    def _commits(self, ctx: RankContext) -> bool:
        return ctx.local_rank == 0
