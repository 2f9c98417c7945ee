"""Planted async-checkpointing jobs: the built-in `dcp_async` with one bug each.

A separate module so that `jobs.py` does not pay for importing DCP and FSDP.
"""

from __future__ import annotations

from ckpt_harness import RankContext
from ckpt_harness.job import Job
from ckpt_harness.jobs.dcp_async import DcpAsyncJob


class PublishesOnlyAtNextSave(DcpAsyncJob):
    """Publishes a background save only when the next save starts, and hides
    that from the harness (no `wait_for_saves`): the last checkpoint is never
    published, and a preemption right after save k leaves `latest` at the
    save before."""

    wait_for_saves = Job.wait_for_saves

    def save(self, ctx: RankContext, step: int) -> None:
        DcpAsyncJob.wait_for_saves(self, ctx)
        super().save(ctx, step)
