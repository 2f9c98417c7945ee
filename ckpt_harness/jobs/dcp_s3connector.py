"""The `dcp` job on a bucket through `s3torchconnector`: AWS's DCP storage
writer and reader (`S3StorageWriter`, `S3StorageReader`), which send their
requests through a native (CRT) client of their own, not botocore.

Model, data, layout, pointer and loading are the `dcp` job's; only how DCP
reaches the bucket differs. It trains on a bucket only (`storage = "s3"`,
its default): the writer cannot write a local directory. The endpoint and
credentials are the run's (`AWS_ENDPOINT_URL`, ...: the native client reads
them at first use); path-style addressing, as a server on loopback needs.
What it does on the bucket (a multipart upload per file, `.metadata` by a
copy of `.metadata.tmp`) is in docs/storage.md; the object probes see its
client's calls (`inject.objects.CRT_OPERATIONS`).
"""

from __future__ import annotations

import os
from typing import Any

import torch.distributed.checkpoint as dcp
from s3torchconnector import S3ClientConfig
from s3torchconnector.dcp import S3StorageReader, S3StorageWriter

from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import commit, prepare_step_dir, step_dir
from ckpt_harness.jobs._store import root
from ckpt_harness.jobs.dcp import DcpJob

#: The region the client signs with: the harness's server takes any (`launch.s3server`).
REGION = "us-east-1"


class DcpS3ConnectorJob(DcpJob):
    """The dcp job, saved and loaded through s3torchconnector's DCP writer and reader."""

    axes = {**DcpJob.axes, "storage": ("s3",)}
    requires = {"s3torchconnector": "ckpt-harness[s3torchconnector]"}
    preload = (*DcpJob.preload, "s3torchconnector", "s3torchconnector.dcp", __name__)

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(root(ctx), step)
        prepare_step_dir(ctx, path)
        dcp.save(self._payload(ctx, step), storage_writer=S3StorageWriter(_region(), str(path), **_client()))
        commit(ctx, path, step, sync_files=self.sync_files)

    def _load(self, target: dict[str, Any], path: Any) -> None:
        dcp.load(target, storage_reader=S3StorageReader(_region(), str(path), **_client()))


def _region() -> str:
    return os.environ.get("AWS_REGION") or REGION


def _client() -> dict[str, Any]:
    return {"s3client_config": S3ClientConfig(force_path_style=True)}
