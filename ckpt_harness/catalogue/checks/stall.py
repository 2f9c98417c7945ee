"""One rank late, blocked or frozen before the collectives of the final save.

The final save is where a finished job hangs: training is over, one rank is
slow or stuck, and its peers wait in the save's first collective until the
process group's timeout (30 minutes on NCCL by default) while the job looks
alive. `late` delays each rank in turn there and expects the run to end
exactly as the uninterrupted one (no resume: a delay kills nothing). `block`
stops each rank in turn there for good: the job passes if every other rank
raises within `hang_timeout` of the block (e.g. a monitored barrier or a
store wait with a timeout); otherwise it is a hang, reported with every
rank's stack and the collective it is in. `frozen` does as `block` with the
ranks that a sleep does not model: stopped with SIGSTOP (no thread of it
runs, C++ watchdogs included) and holding the GIL in a C loop (no Python
thread of it runs), so a job whose liveness hangs on the stuck rank's own
helper threads is caught. `writer` blocks, in turn, each rank's writer of
the final save (a pool task or thread it handed the save to, DCP's writer;
the injected hang at its first operation) and nothing else: the rank's own
thread goes on, and every rank must end within `hang_timeout`, by raising
or finishing (a trainer that waits on its writer without a timeout hangs
there, as DeepSpeed's decoupled engine did: deepspeedai/DeepSpeed#7741).
"""

from __future__ import annotations

import concurrent.futures
from typing import Any, Mapping, Optional, Sequence

from ckpt_harness import oracle, phase
from ckpt_harness.catalogue.checks import NotApplicable, run_settings
from ckpt_harness.config import Setting
from ckpt_harness.inject.faults import BLOCKING, applicable_kinds
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.targets import PROPAGATION, RunRequest
from ckpt_harness.verdict import CaseResult


#: mode -> the fault kinds of its cases, each at each rank in turn.
WRITER = "writer"
MODES = {"block": ("hang",), "frozen": ("sigstop", "gil"), "late": ("delay",), WRITER: ("hang",)}


class Stall:
    params = (
        Setting("mode", str, "block",
                "block a rank for good (or freeze it: SIGSTOP, then the GIL held), make it late, or block its "
                "writer of the final save for good (writer)",
                choices=("block", "frozen", "late", WRITER)),
        *run_settings("save_every", delay=2.0, hang_timeout=5.0, steps=6),
    )
    def validate(self, params: Mapping[str, Any]) -> Optional[str]:
        return None

    def run(self, bench, scenario, only: Optional[Sequence[str]] = None) -> Sequence[CaseResult]:
        from ckpt_harness.pipeline.cases import Case, plan_of

        p = scenario.params
        target = bench.target_for(p)
        if p["mode"] == WRITER and not target.caps.has("background_saves"):  # a script's tells once its golden ran
            raise NotApplicable(target.caps.lacks["background_saves"])
        # Its cases corrupt nothing: no run stopped after the save is needed for the explore default's corruptions.
        base = bench.baseline(target, bench.plan(p, save="last", corruptions=()))
        nothing = base.nothing_to_break()
        if nothing is not None:
            return [nothing]
        points = base.points
        if p["mode"] == WRITER:  # the work the save handed over: its writer's operations
            points = tuple(pt for pt in points if pt.phase == phase.background(base.phase))
            if not points:
                raise NotApplicable(f"save {base.k} handed nothing to a writer (a pool task, a thread, DCP's "
                                    f"writer): its {base.target.noun} writes it before it returns")
        cases = []
        for rank in sorted({pt.rank for pt in points}):
            mine = [pt for pt in points if pt.rank == rank]
            kinds = MODES[p["mode"]]
            able = [pt for pt in mine if applicable_kinds(pt.op, kinds) == list(kinds)]  # not a look (faults.LOOKS)
            point = next((pt for pt in able if pt.op == "collective"), able[0])
            cases += [Case.of((point.fault(kind, p["delay"]),), [point])
                      for kind in MODES[p["mode"]]]
        if only:
            cases = [c for c in cases if c.name in only] or [plan_of(base, name) for name in only]
        with concurrent.futures.ThreadPoolExecutor(bench.parallel) as pool:
            return list(pool.map(lambda case: _stalled(bench, scenario, base, case), cases))


def _stalled(bench, scenario, base, case) -> CaseResult:
    clock = CaseClock(context=(base.golden,))
    result = _stall(bench, scenario, base, case, clock)
    return clock.stamp(result, every=base.plan.timelines == "all")


def _stall(bench, scenario, base, case, clock: CaseClock) -> CaseResult:
    p = scenario.params
    fault, point = case.faults[0], case.points[0]
    blocked = fault.kind in BLOCKING
    run_dir = bench.root / scenario.name / case.name
    run = clock.run(lambda: base.target.run(
        RunRequest("stalled run", faults=case.faults, blocked_grace=p["hang_timeout"] if blocked else None,
                   failure_grace=PROPAGATION), run_dir / "ckpt", run_dir / "run"), broken=base.k)
    clock.judging()
    what = {"hang": "blocked", "delay": f"{p['delay']:g}s late"}.get(fault.kind) or BLOCKING[fault.kind]
    who = f"rank {fault.rank}'s writer" if p["mode"] == WRITER else f"rank {fault.rank}"
    label = f"{who} {what} before {point.op} {point.target} of {fault.phase}"
    repro = bench.repro(scenario, case.name)
    if p["mode"] == WRITER:
        return oracle.judge_frozen_writer(case.name, scenario.property, run, fault.rank, p["hang_timeout"],
                                          label=label, repro=repro)
    if blocked:
        return oracle.judge_blocked(case.name, scenario.property, run, fault.rank, p["hang_timeout"],
                                    label=label, repro=repro)
    return oracle.judge_late(case.name, scenario.property, run, base.reference.final, label=label, repro=repro)


CHECK = Stall()
