"""The unsharded style most training scripts start with: DDP replicas, rank 0
`torch.save`s the replicated state, every rank saves what only it knows.

Layout under `ctx.ckpt_dir`:

    step_000004/model.pt        rank 0: model.module.state_dict()
    step_000004/optimizer.pt    rank 0: optimizer.state_dict()
    step_000004/scheduler.pt    rank 0: scheduler.state_dict()
    step_000004/rng_rank{r}.pt  rank r: step, rank, world size, RNG states, data position
    latest                      rank 0, after a barrier: "step_000004"
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import (
    TinyJob,
    build_mlp,
    check_extra,
    commit,
    prepare_step_dir,
    read_latest,
    readable,
    step_dir,
    torch_save_durable,
    unanimous,
)
from ckpt_harness.jobs._store import root
from ckpt_harness.job.axes import STORAGES


class TorchSaveJob(TinyJob):
    """DDP over gloo with rank-0 `torch.save` checkpoints and a `latest` pointer."""

    #: Whether the last load came from a checkpoint of another world size.
    resharded = False
    checkpoint_layout = "torch_save"
    axes = {**TinyJob.axes, "storage": STORAGES}
    preload = ("numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo", __name__)

    def setup(self, ctx: RankContext) -> None:
        model = DistributedDataParallel(self._compiled(ctx, build_mlp(ctx.seed)))
        model.register_comm_hook(None, _rank_ordered_mean)
        self._build_common(ctx, model, model.parameters())

    def _named_params(self) -> Iterable[tuple[str, torch.nn.Parameter]]:
        return self.model.module.named_parameters()

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(root(ctx), step)
        self._prepare_step_dir(ctx, path)
        if ctx.rank == 0:
            torch_save_durable(self.model.module.state_dict(), path / "model.pt")
            torch_save_durable(self.optimizer.state_dict(), path / "optimizer.pt")
            torch_save_durable(self.scheduler.state_dict(), path / "scheduler.pt")
        torch_save_durable(self._extra(ctx, step), path / f"rng_rank{ctx.rank}.pt")
        commit(ctx, path, step)

    def _prepare_step_dir(self, ctx: RankContext, path) -> None:
        """Make the step directory; what to do with one that exists is here."""
        prepare_step_dir(ctx, path)

    def load(self, ctx: RankContext) -> Optional[int]:
        return unanimous(ctx, lambda: self._load(ctx))

    def _load(self, ctx: RankContext) -> Optional[int]:
        found = read_latest(root(ctx))
        return None if found is None else self._load_from(ctx, *found)

    def _load_from(self, ctx: RankContext, step: int, path: Path) -> int:
        """Load the checkpoint of `step` in `path`, and return the step."""
        self.model.module.load_state_dict(self._read(path / "model.pt"))
        self.optimizer.load_state_dict(self._read(path / "optimizer.pt"))
        self.scheduler.load_state_dict(self._read(path / "scheduler.pt"))
        saved_world = self._read(path / "rng_rank0.pt")["world_size"]
        self.resharded = saved_world != ctx.world_size
        extra_path = path / f"rng_rank{0 if self.resharded else ctx.rank}.pt"
        extra = self._read(extra_path)
        if self.resharded:
            self._restore_resharded(extra, step)
            return step
        check_extra(extra, ctx, step, extra_path)
        self._restore_extra(extra, step)
        return step

    def _read(self, path):
        """Every file of the checkpoint is read here: with weights_only=True,
        so a tampered file is refused instead of run."""
        return torch.load(readable(path), map_location="cpu", weights_only=True)

    def full_state(self, ctx: RankContext):
        return self._full_state()


def _rank_ordered_mean(state, bucket):  # unannotated: DDP rejects string annotations
    """Average gradients in a fixed rank order.

    DDP rebuilds its buckets after the first iteration of every process (one
    flat bucket in parameter order, then buckets in gradient-ready order), and
    gloo's ring all-reduce sums an element in an order set by its offset in
    the bucket. From 3 ranks up, the first step after a resume would then sum
    in a different order than the uninterrupted run did and drift in the last
    bits. Gathering and adding rank by rank makes the sum independent of the
    layout.
    """
    buf = bucket.buffer()
    parts = [torch.empty_like(buf) for _ in range(dist.get_world_size())]
    fut = dist.all_gather(parts, buf, async_op=True).get_future()

    def mean(_: torch.futures.Future) -> torch.Tensor:
        total = parts[0].clone()
        for part in parts[1:]:
            total.add_(part)
        return total.div_(len(parts))

    return fut.then(mean)
