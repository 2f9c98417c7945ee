"""A planted checkpointer through s3torchconnector's DCP writer (the `dcp_s3connector` job, its twin).

`PublishesBeforeItsShards` puts `latest` before `dcp.save`, whose uploads go
through AWS's own native client: a rank that dies before its shard's upload
completed leaves a pointer to a save without it, which the object probes
must see (`inject.objects.CRT_OPERATIONS`) for the crash to be armed there.
"""

from __future__ import annotations

import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from ckpt_harness import RankContext
from ckpt_harness.jobs import dcp_s3connector as crt
from tests.planted.buckets import published_first


class PublishesBeforeItsShards(crt.DcpS3ConnectorJob):
    """`latest` first, then the DCP save it vouches for."""

    def save(self, ctx: RankContext, step: int) -> None:
        path = published_first(ctx, step)
        dcp.save(self._payload(ctx, step), storage_writer=crt.S3StorageWriter(crt._region(), str(path),
                                                                              **crt._client()))
        dist.barrier()
