"""Planted checkpointers for checkpoints in a bucket (`storage = "s3"`), each next to the built-in it differs from.

`PublishesBeforeItsFiles` puts its `latest` object before the objects of the
save it names. On a bucket an object is visible the moment its upload
completes, so a rank that dies between the two leaves a pointer to a save
that is not there: not atomic. Its twin is the built-in `torch_save` job,
which puts `latest` once every rank's files are in (`_common.commit`).
The same mistake through s3torchconnector's DCP writer is in
`tests/planted/crt.py` (s3torchconnector is an extra).
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
        path = published_first(ctx, step)
        _write_files(self, ctx, step, path)
        dist.barrier()


def published_first(ctx: RankContext, step: int):
    """Save `step`'s directory, made and named by `latest` before anything is in it."""
    path = step_dir(root(ctx), step)
    prepare_step_dir(ctx, path)
    if ctx.rank == 0:
        atomic_write_text(root(ctx) / LATEST, path.name + "\n")
    dist.barrier()
    return path


def _write_files(job: TorchSaveJob, ctx: RankContext, step: int, path) -> None:
    """The files of the built-in job's save, as it writes them."""
    if ctx.rank == 0:
        torch_save_durable(job.model.module.state_dict(), path / "model.pt")
        torch_save_durable(job.optimizer.state_dict(), path / "optimizer.pt")
        torch_save_durable(job.scheduler.state_dict(), path / "scheduler.pt")
    torch_save_durable(job._extra(ctx, step), path / f"rng_rank{ctx.rank}.pt")


class RenamesByCopy(TorchSaveJob):
    """A save written under ``step_N.tmp/`` and renamed into ``step_N/``, the
    POSIX way to publish a directory; on a bucket (as fsspec's ``mv`` does
    it) a copy of every object, then a delete of every one. The newest ``step_N/``
    is taken for the checkpoint, so one cut in the middle of the copies is
    taken for complete. (On a bucket only: a local root has no `fs`.)"""

    def save(self, ctx: RankContext, step: int) -> None:
        final = step_dir(root(ctx), step)
        staged = final.with_name(final.name + ".tmp")
        if ctx.rank == 0:  # a crashed attempt's debris: neither is a checkpoint yet
            staged.rmtree()
            final.rmtree()
        dist.barrier()
        _write_files(self, ctx, step, staged)
        dist.barrier()
        if ctx.rank == 0:
            objects = sorted(staged.fs.find(staged.url))  # the "rename": a copy of each, then a delete of each
            for key in objects:
                staged.fs.copy(key, f"{final.url}/{key.rsplit('/', 1)[1]}")
            staged.fs.rm(objects)
            self._seal(final)
        dist.barrier()

    def _seal(self, final) -> None:
        """Nothing: the rename was the commit."""

    def _complete(self, path) -> bool:
        return True

    def _load(self, ctx: RankContext):
        saves = [(int(p.name[len("step_"):]), p) for p in root(ctx).iterdir()
                 if p.name.startswith("step_") and p.name[len("step_"):].isdigit() and self._complete(p)]
        return self._load_from(ctx, *max(saves, key=lambda s: s[0])) if saves else None


class RenamesByCopyThenSeals(RenamesByCopy):
    """The twin: a ``COMMITTED`` object put once the copies are done, and only a sealed save is loaded."""

    def _seal(self, final) -> None:
        (final / "COMMITTED").write_text("")

    def _complete(self, path) -> bool:
        return (path / "COMMITTED").exists()

