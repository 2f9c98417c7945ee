"""Write conflicts (`oracle.conflicts`): the single-writer oracle as a
scenario, so that it has a matrix column, a pass as well as a failure.

The oracle judges every uninterrupted run's trace (`run` and `explore`
show it when it fails, and a failure counts in this column from any
scenario). This check judges the golden run the bench's fault scenarios
share: no run of its own unless it is the only scenario asked for."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.catalogue.checks import run_settings
from ckpt_harness.verdict import CaseResult


class Conflicts:
    params = run_settings("steps", "save_every")
    #: Its one result is a check of the golden run.
    unit = "checks"

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness import oracle

        target = bench.target_for(scenario.params)
        golden = bench.golden(target)
        return [oracle.judge_single_writer("golden", golden, target.repro("run", case="golden"))]


CHECK = Conflicts()
