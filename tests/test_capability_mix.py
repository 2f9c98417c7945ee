"""The pipeline's four ways of seeing a target's runs, each on its own.

`Capabilities.reports`, `steps_known`, `live_state` and `parks` are all true
for a Job and all false for a script, so a branch on one of them could be a
kind test under another name, and a mixed target (one that reports where it
resumed but ends in its last save's state, or one whose ranks do not park)
would take paths no run had taken. Here a Job's runs are judged with the
flags mixed: each path must still pass a correct checkpointer and flag a
broken one, with the same verdicts as the Job's own flags give.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Mapping

from ckpt_harness import Verdict, explore, targets, verify
from ckpt_harness.targets.job import JobTarget


@dataclasses.dataclass(frozen=True)
class Mixed(JobTarget):
    """A Job, seen as a target with other flags would be."""

    flags: Mapping[str, bool] = dataclasses.field(default_factory=dict)

    @functools.cached_property
    def caps(self):
        return dataclasses.replace(JobTarget.caps.func(self), **self.flags)  # type: ignore[attr-defined]


def mixed(job: str, **flags: bool) -> Mixed:
    plain = targets.job(job, world_size=2, steps=4, save_every=2)
    return Mixed(plain.config, flags=flags)


#: As a script's runs are judged (the resume point inferred, the final state its last save's), on a Job.
UNREPORTED = dict(reports=False, live_state=False)


def test_a_job_judged_as_unreported_passes_when_correct_and_is_flagged_when_it_forgets_its_optimizer(tmp_path):
    correct = verify(mixed("torch_save", **UNREPORTED), workdir=tmp_path / "correct", cases=["resume@2"])
    correct.assert_ok()
    checks = {r.check for r in correct.results}
    assert "saves after resume" in checks and "state after load" not in checks, correct.table()

    broken = verify(mixed("tests.planted.jobs:NoOptimizerState", **UNREPORTED), workdir=tmp_path / "broken",
                    cases=["resume@2"])
    flagged = {(r.case, r.check) for r in broken.failures()}
    assert ("resume@2", "final state") in flagged, broken.explain()
    assert all(r.verdict is not Verdict.ERROR for r in broken.results), broken.explain()


def test_a_job_whose_ranks_do_not_park_has_its_crash_cases_run_and_judged_as_when_they_park(tmp_path):
    """`parks` False: the crash cases are run, not cut from the golden trace;
    `steps_known` False: the saves are learned from the golden run. The
    verdicts are the plain Job's, case by case."""
    settings = dict(faults=("crash",), corruptions=(), ops=("rename", "write"))
    job = "tests.planted.checkpointers:LatestBeforeShards"
    plain = explore(targets.job(job, world_size=2, steps=4, save_every=2), workdir=tmp_path / "plain", **settings)
    moving = explore(mixed(job, parks=False, steps_known=False), workdir=tmp_path / "moving", **settings)
    verdicts = {(r.case, r.check): r.verdict for r in plain.results}
    assert {(r.case, r.check): r.verdict for r in moving.results} == verdicts, moving.table()
    assert Verdict.FAIL in verdicts.values() and Verdict.PASS in verdicts.values(), plain.table()
    assert any(r.check == "atomic" and not r.verdict.ok for r in moving.results), moving.table()
