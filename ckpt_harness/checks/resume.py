"""Fault-free resume from every save (`verify`): the faithful baseline every
other scenario's verdict leans on."""

from __future__ import annotations

from typing import Optional, Sequence

from ckpt_harness.scenario import Bench, Scenario, ScenarioResult, summarize

PARAMS = {"steps": 8, "save_every": 2}


def run(bench: Bench, scenario: Scenario, cases: Optional[Sequence[str]] = None) -> ScenarioResult:
    from ckpt_harness.verify import verify

    report = verify(bench.job_arg, world_size=bench.world_size, total_steps=scenario.params["steps"],
                    save_every=scenario.params["save_every"], timeout=bench.timeout,
                    workdir=bench.root / scenario.name, cases=cases)
    return summarize(bench, scenario, report.results, what="checks")
