"""Fault-free resume from every save (`verify`): the faithful baseline every
other scenario's verdict leans on.

With `stop = "hard"` each stop does not wait for a save still landing in the
background (`RunPlan.hard_stop`): judged "atomic", S_k or a save from the
newest published one on. With `stop = "slow-writer"` each save's writers
start only once training went on past it, and the run stops once it landed
(`Stop.SLOW_WRITER`): the resume must load the state the save was called
with (snapshot-consistent), every save but the last. Neither applies to a
job that saves synchronously: its save has landed when it returns, so its
hard stop is the graceful one, instruction for instruction, and nothing
of it is in flight while training goes on. With `stop = "between"` each
run stops between two saves instead, where the step of the next save
would start (`between@K`, K optimizer steps made), and the resume must
start from the newest save complete then: a script's (a Job's run stops
only at its saves). With `stop = "upgrade"` each run stops after its save
under the releases the target upgrades from and resumes under its own
(`upgrade@K`). `stop = "graceful"` stops right after each save alone:
the stop between saves `run` adds is this scenario's."""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import Setting
from ckpt_harness.targets import Stop
from ckpt_harness.verdict import CaseResult


class Resume:
    params = (
        *run_settings("steps", "save_every"),
        Setting("stop", str, "graceful", "how each run stops after its save: graceful (a job that saves in the "
                "background waits for the save in flight), hard (it does not), slow-writer (the save's writers "
                "start only once training went on past it; the run stops once it landed), or chain (graceful, "
                "and each resumed run is stopped after the save it makes next and resumed from what it wrote), or "
                "relocated (graceful, and the checkpoint directory is copied elsewhere with its modification "
                "times against the order of its names, the original removed, before the resume), or between (between "
                "two saves, where the step of the next save would start, K optimizer steps made), or upgrade "
                "(graceful, under the releases the target upgrades from, resumed under its own)",
                choices=("graceful", "hard", "slow-writer", "chain", "relocated", "between", "upgrade")),
    )
    #: Its results are checks of a few cases.
    unit = "checks"

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.pipeline.verify import run_verification
        from ckpt_harness.pipeline.workdir import prepare_workdir

        target = bench.target_for(scenario.params)
        stop = scenario.params["stop"]
        if stop == "chain" and len(target.knowing(bench.golden(target)).save_steps() or ()) < 2:
            raise NotApplicable(f"the {target.noun} saves once: a chain needs a resumed run that saves again")
        if stop in ("hard", "slow-writer"):  # a script tells by its golden run alone if a save lands in the background
            known = target if not target.caps.has("background_saves") else target.knowing(bench.golden(target))
            if not known.caps.has("background_saves"):
                raise NotApplicable(known.caps.lacks["background_saves"])
            if stop == Stop.SLOW_WRITER.value and len(known.save_steps() or ()) < 2:
                raise NotApplicable(f"the {known.noun} saves once, at the end: nothing trains after that save, so "
                                    "none is in flight while training goes on; give it steps past a save")
        if stop == "upgrade" and not target.caps.has("upgrade"):
            raise NotApplicable(target.caps.lacks["upgrade"])
        if stop == "between":
            if not target.caps.has("stops_between"):
                raise NotApplicable(target.caps.lacks["stops_between"])
            from ckpt_harness.pipeline.verify import between_gaps

            if not any(hi - 1 > lo for lo, hi in between_gaps(bench.golden(target))):
                raise NotApplicable(f"the {target.noun} made no optimizer step between two saves (nor after its "
                                    "last) that torch.optim's step hook sees: there is no stop between saves")
        root = prepare_workdir(bench.root / scenario.name)
        # judged against the golden run its bench's explorations of the same target share
        return run_verification(target, root, only, stop, golden=bench.golden(target),
                                timelines=bench.timelines, between=False).results


CHECK = Resume()
