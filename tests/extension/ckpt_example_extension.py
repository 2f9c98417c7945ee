"""An example ckpt_harness extension, registered only through entry points.

`rerun` (check): two uninterrupted runs of the job end bitwise equal, the
precondition every other verdict leans on (a resume can only be judged
against a run that is reproducible). `example_job` (job): the built-in
torch_save trainer under another name.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.catalogue.checks import run_settings
from ckpt_harness.jobs.torch_save import TorchSaveJob
from ckpt_harness.records import Kind
from ckpt_harness.targets import RunRequest


class Rerun:
    params = run_settings(steps=4, save_every=2)

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[Any]:
        target = bench.target_for(scenario.params)  # a job or a script: the check does not ask which
        root = bench.root / scenario.name
        repro = bench.repro(scenario, "rerun")
        first, second = (target.run(RunRequest(f"{name} run", trace_files=False), root / name / "ckpt",
                                    root / name / "run") for name in ("first", "second"))
        if not (first.ok and second.ok):
            return [oracle.judge_live("rerun", run, repro) for run in (first, second) if not run.ok]
        return [oracle.judge_same_state("rerun", scenario.property, first.states(Kind.FINAL),
                                        second.states(Kind.FINAL), "final state of a second identical run", repro)]


RERUN = Rerun()


class ExampleJob(TorchSaveJob):
    """The torch_save reference job, shipped by another package: DDP over gloo,
    rank-0 `torch.save` checkpoints and a `latest` pointer."""
