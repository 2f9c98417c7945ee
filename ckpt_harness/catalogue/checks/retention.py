"""Keep-last N over enough saves that sorting checkpoints by name and by
number disagree.

A rotation that orders its checkpoints as strings deletes the wrong one only
once a step or save count gains a digit (accelerate 0.16 kept
`checkpoint_8, 9, 11` from the eleventh save on), and keeps the wrong ones
only if it keeps more than one. So the run keeps N >= 2 over 13 saves, and
the directory is listed after every save of the fault-free golden run (as
it is published, for a job that saves in the background and rotates then):
each listing must hold exactly the newest N checkpoints, wherever under the
checkpoint directory the job puts them (`oracle.judge_retention`). The
golden run is the bench's, shared with every scenario of the same shape
(a crash during the same rotation, say).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import oracle
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.catalogue.checks.faults import DELETIONS
from ckpt_harness.verdict import CaseResult

#: The one case: the golden run's listings.
CASE = "retention"


class Retention:
    params = run_settings("keep_last", steps=13, save_every=1)
    #: Its result is one check of the golden run.
    unit = "checks"

    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        if params["keep_last"] is None:
            return "the retention check needs keep_last (2 or more finds ordering bugs)"
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        if only and CASE not in only:
            return []
        target = bench.target_for(scenario.params)
        golden = bench.golden(target)
        keep_last = scenario.params["keep_last"]
        saves = golden.saved_steps()
        if not any(event.kind.value in DELETIONS for event in golden.events()):
            raise NotApplicable(f"with keep_last={keep_last}, none of its {len(saves)} saves deleted anything: "
                                f"the {target.noun} does not rotate its checkpoints (if it should, it ignores "
                                "ctx.keep_last)")
        known = target.knowing(golden)
        return [oracle.judge_retention(CASE, golden, keep_last, bench.repro(scenario, CASE),
                                       background=known.saves_in_background() and known.caps.reports,
                                       keeps_best=known.caps.keeps_best)]


CHECK = Retention()
