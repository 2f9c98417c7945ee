"""ckpt_harness: prove that distributed training checkpoints survive the real world.

The public surface is what this module exports; everything else may change.
Importing it is cheap: each name is imported from its module on first use
(PEP 562). Every fresh interpreter that imports any part of the harness runs
this module first: DCP's checkpoint process, which a rank spawns per run and
which imports the probes, torchrun's agent and workers in script mode, a
training script's `import ckpt_harness` for `saving`. Importing the whole
surface here (fifty modules: the pipeline, the oracle, the launcher) made
each of them pay for what none of them uses (docs/speed.md, "The expensive
rows").
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

#: Each exported name -> the module it is defined in.
_EXPORTS = {
    "ExploreConfig": "ckpt_harness.config",
    "RunConfig": "ckpt_harness.config",
    "ScriptConfig": "ckpt_harness.config",
    "ScriptExploreConfig": "ckpt_harness.config",
    "HarnessError": "ckpt_harness.errors",
    "UsageError": "ckpt_harness.errors",
    "explore": "ckpt_harness.pipeline.explore",
    "explore_script": "ckpt_harness.pipeline.explore",
    "full_state": "ckpt_harness.inject.saves",
    "observe": "ckpt_harness.inject.saves",
    "saving": "ckpt_harness.inject.saves",
    "Job": "ckpt_harness.job",
    "RankContext": "ckpt_harness.job",
    "Report": "ckpt_harness.report",
    "CaseResult": "ckpt_harness.verdict",
    "Verdict": "ckpt_harness.verdict",
    "verify": "ckpt_harness.pipeline.verify",
    "verify_script": "ckpt_harness.pipeline.verify",
}

__all__ = [
    "CaseResult", "ExploreConfig", "HarnessError", "Job", "RankContext", "Report", "RunConfig", "ScriptConfig",
    "ScriptExploreConfig", "UsageError", "Verdict", "explore", "explore_script", "full_state", "observe", "saving",
    "verify", "verify_script",
]

if TYPE_CHECKING:
    from ckpt_harness.config import ExploreConfig, RunConfig, ScriptConfig, ScriptExploreConfig
    from ckpt_harness.errors import HarnessError, UsageError
    from ckpt_harness.inject.saves import full_state, observe, saving
    from ckpt_harness.job import Job, RankContext
    from ckpt_harness.pipeline.explore import explore, explore_script
    from ckpt_harness.pipeline.verify import verify, verify_script
    from ckpt_harness.report import Report
    from ckpt_harness.verdict import CaseResult, Verdict


def __getattr__(name: str) -> Any:
    """Import an exported name on first use; it is then a plain attribute."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
