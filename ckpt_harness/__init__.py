"""ckpt_harness: prove that distributed training checkpoints survive the real world.

The public surface is what this module exports; everything else may change.
Importing it is cheap (no torch): ranks import the heavy parts themselves.
"""

from ckpt_harness.config import ExploreConfig, RunConfig, ScriptConfig, ScriptExploreConfig
from ckpt_harness.errors import HarnessError, UsageError
from ckpt_harness.pipeline.explore import explore, explore_script
from ckpt_harness.inject.saves import observe, saving
from ckpt_harness.job import Job, RankContext
from ckpt_harness.report import Report
from ckpt_harness.verdict import CaseResult, Verdict
from ckpt_harness.pipeline.verify import verify, verify_script

__all__ = [
    "CaseResult", "ExploreConfig", "HarnessError", "Job", "RankContext", "Report", "RunConfig", "ScriptConfig",
    "ScriptExploreConfig", "UsageError", "Verdict", "explore", "explore_script", "observe", "saving", "verify",
    "verify_script",
]
