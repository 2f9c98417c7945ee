"""Planted checkpointers for checkpoints in a bucket (`storage = "s3"`), each next to the built-in it differs from.

`PublishesBeforeItsFiles` puts its `latest` object before the objects of the
save it names. On a bucket an object is visible the moment its upload
completes, so a rank that dies between the two leaves a pointer to a save
that is not there: not atomic. Its twin is the built-in `torch_save` job,
which puts `latest` once every rank's files are in (`_common.commit`).
"""

from __future__ import annotations

import torch.distributed as dist

from ckpt_harness import RankContext
from ckpt_harness.jobs._common import LATEST, atomic_write_text, prepare_step_dir, step_dir, torch_save_durable
from ckpt_harness.jobs._store import root
from ckpt_harness.jobs.torch_save import TorchSaveJob


class PublishesBeforeItsFiles(TorchSaveJob):
    """`latest` first, then the files it vouches for."""

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(root(ctx), step)
        prepare_step_dir(ctx, path)
        if ctx.rank == 0:
            atomic_write_text(root(ctx) / LATEST, path.name + "\n")
        dist.barrier()
        if ctx.rank == 0:
            torch_save_durable(self.model.module.state_dict(), path / "model.pt")
            torch_save_durable(self.optimizer.state_dict(), path / "optimizer.pt")
            torch_save_durable(self.scheduler.state_dict(), path / "scheduler.pt")
        torch_save_durable(self._extra(ctx, step), path / f"rng_rank{ctx.rank}.pt")
        dist.barrier()
