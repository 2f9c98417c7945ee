"""Fault-free resume from every save (`verify`): the faithful baseline every
other scenario's verdict leans on.

With `stop = "hard"` each stop does not wait for a save still landing in the
background (`RunPlan.hard_stop`): judged "atomic", S_k or a save from the
newest published one on. Not applicable to a job that saves synchronously:
its save has landed when it returns, so its hard stop is the graceful one,
instruction for instruction, and `resume-every-save` already judges it."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import RunConfig, ScriptConfig, Setting
from ckpt_harness.verdict import CaseResult


class Resume:
    params = (
        *run_settings("steps", "save_every"),
        Setting("stop", str, "graceful", "how each run stops after its save: graceful (a job that saves in the "
                "background waits for the save in flight) or hard (it does not)", choices=("graceful", "hard")),
    )
    #: Its results are checks of a few cases.
    unit = "checks"
    #: A script row verifies the script (`script_mode`), judged alike.
    scripts = True

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.jobref import load
        from ckpt_harness.run import prepare_workdir
        from ckpt_harness.pipeline.verify import run_verification

        config = bench.config(scenario.params, RunConfig)
        script = isinstance(config, ScriptConfig)
        stop = scenario.params["stop"]
        if stop == "hard" and script:
            raise NotApplicable("a script's run stops where a save returns, and script mode cannot tell a "
                                "background save from a synchronous one: give the job as a Job for a hard stop")
        if stop == "hard" and not load(config.job).saves_in_background():
            raise NotApplicable("the job saves synchronously: a save has landed when it returns, so a hard stop "
                                "is the graceful one (resume-every-save)")
        root = prepare_workdir(bench.root / scenario.name)
        if script:  # a script row: judged against the golden run its explorations share
            from ckpt_harness.pipeline.script_mode import run_script_verification

            return run_script_verification(config, root, only, golden=bench.golden()).results
        return run_verification(config, root, only, stop).results


CHECK = Resume()
