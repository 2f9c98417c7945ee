"""Fault-free resume from every save (`verify`): the faithful baseline every
other scenario's verdict leans on."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.checks import run_settings
from ckpt_harness.config import RunConfig
from ckpt_harness.verdict import CaseResult


class Resume:
    params = run_settings("steps", "save_every")
    #: Its results are checks of a few cases.
    unit = "checks"

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.run import prepare_workdir
        from ckpt_harness.verify import run_verification

        config = bench.config(scenario.params, RunConfig)
        return run_verification(config, prepare_workdir(bench.root / scenario.name), only).results


CHECK = Resume()
