"""ckpt_harness: prove that distributed training checkpoints survive the real world."""
from ckpt_harness.job import Job, RankContext

__all__ = ["Job", "RankContext"]
