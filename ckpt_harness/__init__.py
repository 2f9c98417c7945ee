"""ckpt_harness: prove that distributed training checkpoints survive the real world.

The public surface is what this module exports; everything else may change.
Importing it is cheap (no torch): ranks import the heavy parts themselves.
"""

from ckpt_harness.job import Job, RankContext
from ckpt_harness.report import CaseResult, Report, Verdict


def verify(job, **kwargs):  # noqa: ANN001, ANN201 - see ckpt_harness.verify.verify
    from ckpt_harness.verify import verify as _verify

    return _verify(job, **kwargs)


verify.__doc__ = "Verify that `job` resumes bitwise from every save; see ckpt_harness.verify.verify."

__all__ = ["CaseResult", "Job", "RankContext", "Report", "Verdict", "verify"]
