"""Fault-free resume from every save (`verify`): the faithful baseline every
other scenario's verdict leans on."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.checks import run_settings
from ckpt_harness.config import RunConfig, ScriptConfig
from ckpt_harness.verdict import CaseResult


class Resume:
    params = run_settings("steps", "save_every")
    #: Its results are checks of a few cases.
    unit = "checks"
    #: A script row verifies the script (`script_mode`), judged alike.
    scripts = True

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.run import prepare_workdir
        from ckpt_harness.verify import run_verification

        config = bench.config(scenario.params, RunConfig)
        root = prepare_workdir(bench.root / scenario.name)
        if isinstance(config, ScriptConfig):  # a script row: judged against the golden run its explorations share
            from ckpt_harness.script_mode import run_script_verification

            return run_script_verification(config, root, only, golden=bench.golden()).results
        return run_verification(config, root, only).results


CHECK = Resume()
