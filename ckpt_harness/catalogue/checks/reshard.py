"""World-size change: save at N ranks, resume at M, compare `full_state`.

Only the world-size independent state can be compared (RNG streams and data
shards are per rank and have no counterpart at M), so the target says what
that is: a job through `Job.full_state`, a script through
`ckpt_harness.full_state` (which its golden run shows); one without it is
"n/a" here. The resumed run must also train to the end at M.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import Setting
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.targets import PROPAGATION, RunRequest
from ckpt_harness.verdict import CaseResult


class Reshard:
    params = (
        Setting("resume_at", str, "double", "the world size to resume at, from the bench's",
                choices=("double", "half")),
        *run_settings("save_every", steps=6),
    )
    #: The state that is the same at every world size (`Job.full_state`).
    requires = ("full_state",)

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.launch import MAX_WORLD_SIZE

        n = bench.world_size
        m = n * 2 if scenario.params["resume_at"] == "double" else n // 2
        if not 1 <= m <= MAX_WORLD_SIZE or m == n:
            raise NotApplicable(f"world size {n} has no {scenario.params['resume_at']} in 1..{MAX_WORLD_SIZE}")
        case = f"ws{n}->ws{m}"
        repro = bench.repro(scenario, case)
        saver = bench.known(bench.target_for(scenario.params), self.requires)
        steps = saver.save_steps() or []
        k = steps[-1] if len(steps) < 2 else steps[-2]
        root = bench.root / scenario.name
        clock = CaseClock()
        saved = clock.run(lambda: saver.run(
            RunRequest("saving run", stop_after_save=k, trace_files=False, full_state=True), root / "ckpt",
            root / "save"), broken=k)
        failed = oracle.judge_reshard_save(case, scenario.property, saved, k, n, repro, savers=saver.savers(k))
        if failed is not None:
            return [clock.stamp(failed, every=bench.timelines == "all")]
        resumed = clock.run(lambda: saver.replace(world_size=m).run(
            RunRequest("resumed run", trace_files=False, full_state=True, failure_grace=PROPAGATION), root / "ckpt",
            root / "resume"), resume=True)
        clock.judging()
        judged = oracle.judge_reshard(case, scenario.property, saved, resumed, k, n, m, repro,
                                      reports=saver.caps.reports, save_steps=steps, savers=saver.savers(k))
        return [clock.stamp(judged, every=bench.timelines == "all")]


CHECK = Reshard()
