"""Faults injected at the points of one save, as `explore` does, narrowed to
the kinds, operations and corruptions a scenario names.

Scenarios with equal configs share one baseline through the bench; only
their cases differ.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import Setting
from ckpt_harness.verdict import CaseResult

#: Operations that delete (a file, a directory, objects of a bucket): a save that performs none does not rotate.
DELETIONS = ("unlink", "rmtree", "rmdir", "delete")


class Faults:
    #: Its cases can be split over machines (`scenario --shard K/N`, `Bench.split`).
    splits = True
    params = (
        *run_settings(faults=(), corruptions=()),
        *run_settings("ops", after=False),
        *run_settings("save", "save_every", "keep_last", "nodes", "durability", "delay", "grace", "hang_timeout",
                      steps=6),
        Setting("rotates", bool, False, "n/a unless the save deletes something (the job honours keep_last)"),
    )
    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        if params["rotates"] and params["keep_last"] is None:
            return "rotates = true needs keep_last"
        if not (params["faults"] or params["corruptions"] or params["after"]):
            return "nothing to inject: set faults, corruptions or after = true"
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.pipeline.cases import named, plan_cases, run_cases

        target = bench.target_for(scenario.params)
        base = bench.baseline(target, bench.plan(scenario.params))
        nothing = base.nothing_to_break()
        if nothing is not None:
            return [nothing]
        if scenario.params["rotates"] and not _deletes(base):
            if base.plan.save != "last" and target.saves_in_background():
                # A background save is rotated in when it is published, at the next save or the end of
                # training: only the last save's publication is in the window a case breaks.
                base = bench.baseline(target, bench.plan(scenario.params, save="last"))
            if not _deletes(base):
                raise NotApplicable(f"with keep_last={target.values.get('keep_last')} save {base.k} deleted "
                                    f"nothing: the {target.noun} does not rotate its checkpoints")
        cases = plan_cases(base)
        if not cases and not only:
            kinds = ", ".join(base.plan.faults or base.plan.corruptions)
            after = " or the work after it" if base.plan.save == "last" else ""
            raise NotApplicable(f"save {base.k}{after} made no {', '.join(base.plan.ops or ('operation',))}: "
                                f"nothing for {kinds} to act on")
        if only:
            cases = named(base, only, cases)
        else:
            cases = bench.within_budget(scenario, base, cases)
        cases = bench.split(scenario, cases)
        missing = base.nothing_to_corrupt()
        return run_cases(base, cases, bench.progress) + ([missing] if missing is not None and not only else [])


CHECK = Faults()


def _deletes(base: Any) -> bool:
    return any(p.op in DELETIONS for p in base.points)
