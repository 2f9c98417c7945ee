"""Planted DCP jobs: the built-in `dcp` job with a state small enough that
DCP's `.metadata` pickle fits in the file's buffer, which is when torch
2.13's fsync-before-flush in `_FileSystemWriter.finish` loses it.

The built-in job's `.metadata` (about 12 KB) goes to the kernel in the
`write()` that outgrows the 4 KiB buffer, before DCP's fsync, so it alone
cannot show the bug; a job with one linear layer writes about 3 KB, which
sits in the buffer until the file is closed, after the fsync.

A separate module from `jobs.py` so that the jobs there do not pay for
importing DCP and FSDP.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from ckpt_harness import RankContext
from ckpt_harness.jobs._common import IN_DIM, OUT_DIM
from ckpt_harness.jobs.dcp import DcpJob


class SmallDcp(DcpJob):
    """The built-in commit (it fsyncs every file before `latest`): durable."""

    def setup(self, ctx: RankContext) -> None:
        with torch.random.fork_rng(devices=[]):  # as `build_mlp`: same weights on every rank
            torch.manual_seed(ctx.seed)
            model = nn.Linear(IN_DIM, OUT_DIM, bias=False)
        fully_shard(model, mesh=init_device_mesh("cpu", (ctx.world_size,)))
        self._build_common(ctx, model, model.parameters())
        # Plain SGD: no per-parameter state, the fewest param_group keys.
        self.optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=2, gamma=0.5)


class SmallDcpAlone(SmallDcp):
    """Trusts DCP's own fsyncs (the built-in job's commit before issue 13):
    a power loss right after the save returned empties `.metadata`."""

    sync_files = False
