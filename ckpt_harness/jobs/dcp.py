"""The sharded style: FSDP2 `fully_shard` on a CPU mesh, saved and loaded with
`torch.distributed.checkpoint` (DCP), every rank writing its own shards.

What only one rank knows (its RNG states and data position) travels inside
the same DCP save as a per-rank key, so DCP's `.metadata` commit covers it and
a resume cannot pair shards from one save with extras from another. The
scheduler and step ride along in that entry; they are equal on every rank.

Layout under `ctx.ckpt_dir`:

    step_000004/.metadata        DCP global metadata (coordinator, written last)
    step_000004/__{r}_0.distcp   rank r's shards of model and optimizer, and
                                 its `extra.rank{r}` entry (step, rank, world
                                 size, RNG states, data position, scheduler)
    latest                       rank 0, after a barrier: "step_000004"

Rank 0 fsyncs every file of the step directory before it publishes `latest`:
DCP fsyncs `.metadata` before flushing it (torch 2.13,
`_FileSystemWriter.finish`), so whenever the pickle, or its last 64 KiB
frame, fits in the file's buffer, DCP alone returns from a save whose
`.metadata` a power loss leaves empty (docs/findings.md).
"""

from __future__ import annotations

import io
from typing import Any, Iterable, Optional

import torch
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import (
    TinyJob,
    build_mlp,
    check_extra,
    commit,
    prepare_step_dir,
    read_latest,
    step_dir,
    unanimous,
)
from ckpt_harness.jobs._store import Root, is_local, root
from ckpt_harness.job.axes import STORAGES


class DcpJob(TinyJob):
    """FSDP2 over gloo with DCP checkpoints and a `latest` pointer."""

    warm_start = True
    checkpoint_layout = "dcp"
    axes = {**TinyJob.axes, "storage": STORAGES}
    #: Whether the commit fsyncs the files DCP wrote (False: trust DCP's own
    #: fsyncs, which a power loss can prove wrong).
    sync_files = True
    preload = (
        "numpy",
        "torch",
        "torch.distributed",
        "torch.distributed.checkpoint",
        "torch.distributed.checkpoint.state_dict",
        "torch.distributed.fsdp",
        "torch._dynamo",
        __name__,
    )

    def setup(self, ctx: RankContext) -> None:
        model = build_mlp(ctx.seed)
        mesh = init_device_mesh("cpu", (ctx.world_size,))
        # One FSDP unit for the whole model: every parameter is still sharded
        # across ranks, and one all-gather plus one reduce-scatter per step
        # (instead of one per layer) keeps a step cheap on an oversubscribed
        # CPU box.
        fully_shard(model, mesh=mesh)
        self._build_common(ctx, self._compiled(ctx, model), model.parameters())

    def _named_params(self) -> Iterable[tuple[str, torch.nn.Parameter]]:
        # by the FQNs DCP saves them under: its state-dict helpers drop a compiled wrapper's `_orig_mod.`
        return getattr(self.model, "_orig_mod", self.model).named_parameters()

    def _extra_key(self, ctx: RankContext) -> str:
        return f"rank{ctx.rank}"

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(root(ctx), step)
        prepare_step_dir(ctx, path)
        dcp.save(self._payload(ctx, step), checkpoint_id=checkpoint_id(path))
        commit(ctx, path, step, sync_files=self.sync_files)

    def _payload(self, ctx: RankContext, step: int) -> dict[str, Any]:
        """What one save hands DCP: sharded model and optimizer, and this rank's extras."""
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        extra = self._extra(ctx, step)
        extra["scheduler"] = self.scheduler.state_dict()
        # Pre-serialised to bytes so DCP stores it as one opaque per-rank blob
        # instead of flattening the RNG tuples into keys of its own.
        blob = io.BytesIO()
        torch.save(extra, blob)
        return {
            "model": model_sd,
            "optim": optim_sd,
            "extra": {self._extra_key(ctx): blob.getvalue()},
        }

    def load(self, ctx: RankContext) -> Optional[int]:
        # Split around dcp.load: it is a collective that already raises on
        # every rank, so only the local steps either side need agreeing on.
        found = unanimous(ctx, lambda: read_latest(root(ctx)))
        if found is None:
            return None
        step, path = found
        model_sd, optim_sd = get_state_dict(self.model, self.optimizer)
        # DCP reshards model and optimizer to this world size by itself; the
        # per-rank extras exist only for the ranks that saved.
        resharded = unanimous(ctx, lambda: _saved_world_size(path) != ctx.world_size)
        key = "rank0" if resharded else self._extra_key(ctx)
        target: dict[str, Any] = {"model": model_sd, "optim": optim_sd, "extra": {key: b""}}
        self._load(target, path)
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=target["model"],
            optim_state_dict=target["optim"],
        )
        unanimous(ctx, lambda: self._restore_blob(ctx, step, path, target["extra"][key], resharded))
        return step

    def _load(self, target: dict[str, Any], path: Root) -> None:
        """Read the checkpoint at `path` into `target` (DCP picks its reader by the path: `checkpoint_id`)."""
        dcp.load(target, checkpoint_id=checkpoint_id(path))

    def _restore_blob(self, ctx: RankContext, step: int, path, blob: bytes, resharded: bool) -> None:
        extra = torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
        self.scheduler.load_state_dict(extra["scheduler"])
        if resharded:
            self._restore_resharded(extra, step)
            return
        check_extra(extra, ctx, step, path)
        self._restore_extra(extra, step)

    def full_state(self, ctx: RankContext):
        return self._full_state()


def checkpoint_id(path: Root) -> Any:
    """DCP's `checkpoint_id` for `path`: a URL picks its fsspec writer and reader (`_storage_setup`)."""
    return path if is_local(path) else str(path)


def _saved_world_size(path) -> int:
    """How many ranks wrote the checkpoint: one `extra.rank{r}` entry each."""
    from torch.distributed.checkpoint._fsspec_filesystem import FsspecReader

    reader = dcp.FileSystemReader(path) if is_local(path) else FsspecReader(str(path))
    keys = reader.read_metadata().state_dict_metadata
    return sum(1 for k in keys if k.startswith("extra.rank"))
