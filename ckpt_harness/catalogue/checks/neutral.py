"""Saves that change training: a run must end where it ends saving elsewhere.

A save that mutates the live state (casts a parameter to the export dtype
in place, moves the optimizer's moments, draws from the training RNG)
changes the run whether or not it is ever resumed. The golden run saves
too, so `faithful` cannot see it: every resume is compared with a run the
save changed just the same. This check runs the target again, saving only
at its last step, and compares the two ends bitwise, naming the keys (a
target's final state; a script's is its last save, which both runs make at
the same step). A target that saves where it always does whatever it is
told is n/a, saying so: comparing a run with itself proves nothing. A
difference is a FAIL only once the golden run, made again, ends where it
did: a target whose identical runs end apart is UNKNOWN, not blamed on
its saves.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.records import Kind
from ckpt_harness.verdict import CaseResult, Verdict

CASE = "save-neutral"


class Neutral:
    params = run_settings(steps=6, save_every=2)
    unit = "checks"

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        if params["steps"] % params["save_every"]:
            return "steps must be a multiple of save_every: both runs make the last save, at the last step"
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.pipeline.workdir import prepare_workdir
        from ckpt_harness.targets import RunRequest

        if only and CASE not in only:
            return []
        steps = scenario.params["steps"]
        target = bench.target_for(scenario.params)
        golden = bench.golden(target)
        saves = oracle.save_steps(golden)
        if len(saves) < 2:
            raise NotApplicable(f"the {target.noun} saves once (at {', '.join(map(str, saves)) or 'no step'}): "
                                "no earlier save could change what training did after it")
        once = bench.target_for(scenario.params, save_every=steps)
        root = prepare_workdir(bench.root / scenario.name)
        line = bench.repro(scenario, CASE)
        run = once.run(RunRequest("run saving at its last step only", trace_files=False), root / "ckpt",
                       root / "run")
        live = oracle.judge_golden(CASE, run, line, target.noun)
        if live.verdict is not Verdict.PASS:
            return [live]
        if oracle.save_steps(run) != [steps]:
            raise NotApplicable(f"told to save at step {steps} only, it saved at "
                                f"{', '.join(map(str, oracle.save_steps(run))) or 'no step'}: give it "
                                "its save interval (for a script: --script-args 'save_every=--save-every {}')")
        what = (f"the end of the run saving at {', '.join(map(str, saves))} vs. the same run saving at step "
                f"{steps} only")
        judged = oracle.judge_same_state(CASE, CASE, _end(target, golden, steps), _end(target, run, steps), what,
                                         line)
        if judged.verdict.ok:
            return [dataclasses.replace(judged, summary=f"{what}: {judged.summary}")]
        # Told apart from a target whose identical runs end apart anyway: the golden run once more.
        again = target.run(RunRequest("the golden run again", trace_files=False), root / "again" / "ckpt",
                           root / "again" / "run")
        same = oracle.judge_same_state(CASE, CASE, _end(target, golden, steps), _end(target, again, steps),
                                       "two identical runs' ends", line)
        if oracle.judge_golden(CASE, again, line, target.noun).verdict is Verdict.PASS and same.verdict.ok:
            return [judged]
        return [oracle.cannot_judge(CASE, CASE, f"two identical runs saving at {', '.join(map(str, saves))} end "
                                                f"apart ({same.summary.partition(': ')[2] or same.summary}): the "
                                                f"{target.noun} is not deterministic, so a difference tells nothing "
                                                "about its saves; seed every source of randomness",
                                    judged.details)]


def _end(target, run, steps: int):
    """How `run` ended: a target's final state; a script's last save, on the ranks that make it."""
    return run.states(Kind.FINAL) if target.caps.live_state else oracle.saves_by_step(run).get(steps)


CHECK = Neutral()
