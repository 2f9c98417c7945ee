"""Fault cases: which to run against a baseline, and running one.

A case is a plan (faults armed at points of save k) or a corruption of one
file of the committed save k, or a power loss right after save k returned.
Running it is a function of the baseline and the case: a fresh directory, a
run with the faults armed that stops after save k (the power-loss model
applied to the directory if power was lost), then a fresh group that resumes
by the job's own logic and trains to the end; the oracle judges the resume.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import shutil
import threading
import traceback
from pathlib import Path
from typing import Callable, Iterable, Optional, Sequence

from ckpt_harness import oracle, phase
from ckpt_harness.oracle import findings
from ckpt_harness.config import DEFAULT_FAULTS, ends_group
from ckpt_harness.errors import UsageError
from ckpt_harness.inject import corrupt, durability, payload
from ckpt_harness.inject.faults import (BLOCKING, BY_NAME, FAULT_KINDS, OPS, Fault, applicable_kinds, parse_plan,
                                       plan_label)
from ckpt_harness.inject.trace import Event, EventKind, fields
from ckpt_harness.pipeline import confirm
from ckpt_harness.pipeline.baseline import Baseline, BaselineFailed, Point
from ckpt_harness.pipeline.resumes import DirState
from ckpt_harness.pipeline.workdir import fresh_dir
from ckpt_harness.records.timeline import Note
from ckpt_harness.records import data_reader
from ckpt_harness.records.runs import Run
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.targets import PROPAGATION, RunRequest
from ckpt_harness.verdict import CaseResult, Site

#: The kind of a multi-fault plan whose property is judged, most severe first.
SEVERITY = tuple(k.name for k in sorted(FAULT_KINDS, key=lambda k: k.severity))
POWER_LOSS_AFTER = "power-loss-after"
#: How many more times a faulted run is made when it went on quietly without
#: reaching its fault's point: its ranks took another order than the golden
#: run's (which one deletes a checkpoint first), and the next run may take it.
NEVER_FIRED_RETRIES = 2


@dataclasses.dataclass(frozen=True)
class Case:
    """One case; `name` is what `--case` takes to replay it."""

    name: str
    #: The kind that decides the property judged (see `dominant`).
    kind: str
    points: tuple[Point, ...] = ()
    faults: tuple[Fault, ...] = ()
    #: For corruption cases: the file damaged (relative to the checkpoint dir).
    path: Optional[str] = None

    @classmethod
    def of(cls, faults: tuple[Fault, ...], points: Sequence[Point]) -> "Case":
        """A case of one or more faults; `points` describe where they fire."""
        where = {_place(p): p for p in points}
        chosen = tuple(where[_place(f)] for f in faults if _place(f) in where)
        return cls(plan_label(faults), dominant(faults), chosen, faults)

    @property
    def site(self) -> Optional[Site]:
        """Where its one fault strikes (None: no fault, several, or no point)."""
        if len(self.faults) != 1 or len(self.points) != 1:
            return None
        p = self.points[0]
        return Site.at(p, self.faults[0].kind)

    @property
    def delays_only(self) -> bool:
        """Its faults only delay: it must end as the same run without them."""
        return bool(self.faults) and all(f.kind == "delay" for f in self.faults)

    def describe(self) -> str:
        if self.path is not None:
            return self.path
        if not self.faults:
            return "power loss right after the save returned"
        return " + ".join(
            f"{f.kind} at {p.describe()}" if p else f.label
            for f, p in zip(self.faults, [*self.points, *[None] * len(self.faults)])
        )

    def row(self, outcome: oracle.Outcome) -> tuple[str, ...]:
        """The case's cells in an exploration table (`verdict.EXPLORE_COLUMNS`)."""
        if not self.points and self.faults:  # named by address, at a point the golden run did not reach
            first = self.faults[0]
            return (str(first.rank), "", first.op or "-", first.at or "", "not in the golden run",
                    "+".join(dict.fromkeys(f.kind for f in self.faults)), outcome.kind.value)
        if not self.points:
            return ("*", "", findings.CORRUPT if self.path else "-", self.path or "", "", self.kind, outcome.kind.value)
        join = lambda values: "+".join(dict.fromkeys(values))  # noqa: E731
        ps = self.points
        return (join(str(p.rank) for p in ps), join(str(p.index) for p in ps), join(p.op for p in ps),
                join(p.target for p in ps), join(p.caller for p in ps), join(f.kind for f in self.faults),
                outcome.kind.value)


def _place(at) -> tuple:
    """Where a point or a placed fault is: by address, whatever the order."""
    return (at.rank, at.phase, at.at, at.nth)


def dominant(faults: Sequence[Fault]) -> str:
    return min((f.kind for f in faults), key=SEVERITY.index)


def plan_cases(baseline: Baseline, points: Optional[Iterable[Point]] = None) -> list[Case]:
    """Every case the plan asks for: each fault kind at each point it
    applies to (of the plan's `ops`), power loss after the save, each
    corruption of each committed file."""
    plan = baseline.plan
    chosen = [p for p in (baseline.points if points is None else points) if not plan.ops or p.op in plan.ops]
    cases = [Case.of((p.fault(kind, plan.seconds(kind)),), [p])
             for p in chosen for kind in applicable_kinds(p.op, _kinds_at(baseline, p))]
    if plan.power_loss_after:
        cases.append(Case(POWER_LOSS_AFTER, POWER_LOSS_AFTER))
    cases += [Case(f"{kind}:{path}", kind, path=path) for path in baseline.committed_files for kind in plan.corruptions]
    return cases


def _kinds_at(baseline: Baseline, point: Point) -> tuple[str, ...]:
    """The kinds armed at `point`. The default kinds gain a delay after the
    last save: what the ranks do there (delete the checkpoints they no longer
    keep, move `latest`, gather the final model) is done by every rank
    without a save's barriers around it, and its bugs are races between
    them, which only a late rank shows (a rank that checked a checkpoint
    exists, then deletes it after its peer did)."""
    kinds = baseline.plan.faults
    if kinds == DEFAULT_FAULTS and phase.foreground(point.phase) != baseline.phase:
        return (*kinds, "delay")
    return kinds


def named(baseline: Baseline, names: Sequence[str], planned: Sequence[Case]) -> list[Case]:
    """The cases `names` denote: planned ones by name, or any fault plan of this save."""
    by_name = {c.name: c for c in planned}
    return [by_name.get(n) or plan_of(baseline, n) for n in names if n != "golden"]


def plan_of(baseline: Baseline, name: str) -> Case:
    """The case a fault plan denotes, also one no enumeration lists. A fault
    named by address that the golden run did not reach is armed all the
    same: the run it replays may take another order (a peer deleted first)."""
    try:
        faults = parse_plan(name)
    except ValueError as exc:
        raise UsageError(
            f"no case named {name!r} in this exploration: give a name from its table or repro "
            f"lines, or a fault plan ({exc})"
        ) from None
    placed = []
    for f in faults:
        point = next((p for p in baseline.points if (p.rank, p.phase) == (f.rank, f.phase)
                      and ((p.at, p.nth) == (f.at, f.nth) if f.at else p.index == f.index)), None)
        if point is None and f.at is None:
            raise UsageError(f"{f.label}: rank {f.rank} has no operation #{f.index} in {f.phase}")
        op = point.op if point is not None else f.op
        if op not in OPS:
            raise UsageError(f"{f.label}: {op} is not an operation the probes see (one of {', '.join(OPS)})")
        if not f.applies_to(op):
            where = point.describe() if point is not None else f.at
            raise UsageError(f"{f.label}: {f.kind} does not apply to {op} ({where})")
        placed.append(f.placed(point.index, point.at, point.nth) if point is not None else f)
    return Case.of(tuple(placed), baseline.points)


# -- running -----------------------------------------------------------------------------
def run_case(baseline: Baseline, case: Case) -> CaseResult:
    """Run one case against `baseline` and judge it, with where its seconds
    went (`CaseResult.timings`); a harness error is this case's ERROR. A
    case that did not pass with a warm start is judged by a cold run of it
    (`pipeline.confirm`)."""
    result = _judged(baseline, case)
    if confirm.doubted([result]):
        result = confirm.confirmed(result, _judged_cold(baseline, case))
    return dataclasses.replace(result, site=case.site)


def _judged_cold(baseline: Baseline, case: Case) -> CaseResult:
    """`case` run with cold starts on `baseline.cold()`, placed among its points."""
    try:
        cold = baseline.cold()
    except BaselineFailed as failed:
        return oracle.cannot_judge(case.name, oracle.property_for(case.kind),
                                   f"the case could not be run again with cold starts, as a case that did not pass "
                                   f"warm must be before it is reported: {failed.result.summary}")
    return _judged(cold, placed_on(case, cold))


def placed_on(case: Case, baseline: Baseline) -> Case:
    """`case` on another golden run of the same target (`Baseline.cold`'s):
    each fault named by address at that run's operation of the address (the
    index a state derived from its trace is cut at); a fault named by index,
    or at an address that run did not reach, a corruption and a power loss
    as they are."""
    if not case.faults:
        return case
    where = {_place(p): p for p in baseline.points}
    faults = tuple(f.placed(where[_place(f)].index, f.at, f.nth) if f.at and _place(f) in where else f
                   for f in case.faults)
    return Case.of(faults, baseline.points)


def _judged(baseline: Baseline, case: Case) -> CaseResult:
    clock = CaseClock(context=(baseline.golden,))
    marks: list[Note] = []
    try:
        result = _run_case(baseline, case, fresh_dir(baseline.root / "cases", case.name), clock, marks)
    except durability.DurabilityError as exc:  # a trace the model will not guess at: no statement about the job
        result = oracle.cannot_judge(
            case.name, oracle.property_for(case.kind),
            f"the power-loss model cannot follow this run's trace ({exc}); most often the save wrote through a "
            "process or channel the probes do not see (a subprocess the job started, mmap), see the exploration's "
            "warnings", traceback.format_exc())
    except Exception as exc:  # noqa: BLE001 - this case is an ERROR; the other cases go on
        result = oracle.harness_error(case.name, oracle.property_for(case.kind), exc, baseline.repro(case.name),
                                      row=case.row)
    return clock.stamp(result, marks, every=baseline.plan.timelines == "all")


def run_cases(baseline: Baseline, cases: Sequence[Case],
              progress: Optional[Callable[[int, int, CaseResult], None]] = None) -> list[CaseResult]:
    """Run `cases`, `parallel` at a time (each group from its own warm server); results in order.
    `progress(done, total, result)` is called as each finishes."""
    done = 0
    lock = threading.Lock()

    def one(case: Case) -> CaseResult:
        nonlocal done
        result = run_case(baseline, case)
        with lock:
            done += 1
            if progress is not None:
                progress(done, len(cases), result)
        return result

    pool = concurrent.futures.ThreadPoolExecutor(baseline.plan.parallel)
    try:
        return list(pool.map(one, cases))
    except KeyboardInterrupt:
        # Ctrl-C or SIGTERM (`cli`): no case starts after it, and the groups of those running are ended now.
        # Leaving the pool as `with` does would wait for the cases in flight, with every run they had left
        # (an explore of OLMo-core went on starting runs for 30 s after SIGINT, then SIGTERM).
        from ckpt_harness.launch import cancel

        pool.shutdown(wait=False, cancel_futures=True)
        cancel()
        raise
    finally:
        pool.shutdown(wait=False)


def _run_case(baseline: Baseline, case: Case, case_dir: Path, clock: CaseClock, marks: list[Note]) -> CaseResult:
    """The case's verdict; `marks` gets what its timeline must show that its runs' traces do not."""
    plan, target = baseline.plan, baseline.target
    ckpt = case_dir / "ckpt"
    save_returned = True
    faulted: Optional[Run] = None
    lost: Optional[durability.PowerLoss] = None
    derived = None
    retried = 0  # the faulted run's attempt, when the first ones never reached the fault's point
    canary = case_dir / "canary"  # outside the checkpoint: where a planted payload leaves its trace
    if case.path is not None:  # corruption of the committed save
        shutil.copytree(baseline.committed, ckpt)
        detail = f"{case.path} {corrupt.CORRUPTIONS[case.kind](ckpt / case.path, canary)}"
        marks.append(Note("resumed run", f"before the resume: {detail}", "corruption"))
    else:
        derived = _derived(baseline, case, ckpt) if plan.derive_states and not baseline.replay_gap else None
        if derived is not None:
            save_returned, lost = derived
            marks.extend(_derived_marks(baseline, case))
        else:
            faulted, lost = _faulted_run(baseline, case, ckpt, case_dir / "fault", clock)
            for attempt in range(2, 2 + NEVER_FIRED_RETRIES):
                # A failed run is judged as it is (`oracle.judge_fault`); a power loss
                # right after the save arms nothing that could fire.
                if not case.faults or faulted.fired() or not faulted.ok:
                    break
                shutil.rmtree(ckpt, ignore_errors=True)
                faulted, lost = _faulted_run(baseline, case, ckpt, case_dir / f"fault{attempt}", clock)
                retried = attempt
            save_returned = faulted.done_steps()[-1:] == [baseline.k]
        detail = case.describe()
    resumed, shares = _resume(baseline, case, ckpt, case_dir / "resume", clock)
    if all(run is not resumed for run in clock.seen):  # another case's resume: this case's timeline shows it too
        clock.seen.append(resumed)
    undelayed = _undelayed(baseline, case) if faulted is not None and case.delays_only else None
    clock.judging()
    # Only a target that says when a background save was published may have an unpublished one taken back.
    background = (oracle.Background(faulted.published_step())
                  if faulted is not None and case.faults and target.caps.reports and target.saves_in_background()
                  else None)
    result = oracle.judge_fault(case.name, case.kind, baseline.reference, faulted if case.faults else None, resumed,
                                save_returned=save_returned, detail=detail, repro=baseline.repro(case.name),
                                 row=case.row, ran=payload.ran(canary), background=background,
                                 ends_group=ends_group(target.values), undelayed=undelayed)
    notes = []
    if retried:
        notes.append(f"the faulted run was made {retried} times: "
                     + ("the fault fired in the last" if faulted.fired() else "its point was reached in none")
                     + " (a run that takes another path than the golden one, its ranks in another order, goes on "
                       "quietly past a point it never reaches)")
    if derived is not None:
        notes.append("the directory this case leaves is derived from the golden run's trace, cut at this point "
                     f"({_DERIVED_WHY[case.kind]}; --no-derive-states runs the faulted save instead)")
    if shares is not None:
        notes.append(f"judged against the resume of case {shares}: both left the same checkpoint directory")
        result = dataclasses.replace(result, shares=shares)
    if notes:
        note = "\n".join(notes)
        result = dataclasses.replace(result, details=f"{note}\n\n{result.details}" if result.details else note)
    if lost is not None and lost.losses:
        # at the power loss: in the faulted run, or where the golden run was cut
        moment = (next((e.t for e in faulted.events() if e.fault), None) if faulted is not None else
                  next((m.at for m in marks if m.category == "fault"), None))
        marks.append(Note(faulted.name if faulted is not None else baseline.golden.name,
                          f"power loss dropped {len(lost.losses)}", "power-loss", moment,
                          args={"lost": [str(loss) for loss in lost.losses]}))
    return _explain_power_loss(result, lost, plan.durability)


def _derived_marks(baseline: Baseline, case: Case) -> list[Note]:
    """Where the golden run was cut to derive the case's directory: its fault
    marked at the golden operation it stands before (after, for crash-after)."""
    if not case.faults:  # a power loss right after save k: each rank as it parked
        ended = max((e.t for r in baseline.golden.ranks for e in r.events if e.phase == baseline.phase), default=None)
        return [Note(baseline.golden.name, f"power loss (derived): right after save {baseline.k} returned", "fault",
                     ended)]
    notes = []
    for f in case.faults:
        events = next((r.events for r in baseline.golden.ranks if r.rank == f.rank), [])
        at = next((e.t for e in events if e.phase == f.phase and e.point is not None
                   and e.point <= f.index < e.point + e.count), None)
        notes.append(Note(baseline.golden.name, f"fault: {f.kind} (derived from this run)", "fault", at, f.rank,
                          {"phase": f.phase, "before operation": f.index}))
    return notes


_DERIVED_WHY = {**{k.name: k.derivable for k in FAULT_KINDS if k.derivable},
                POWER_LOSS_AFTER: BY_NAME["power-loss"].derivable}


def _derived(baseline: Baseline, case: Case, ckpt: Path) -> Optional[tuple[bool, Optional[durability.PowerLoss]]]:
    """The state a case leaves, written to `ckpt` from the golden trace, and
    whether save k returned on every rank; None where the trace does not decide it.

    A target whose stopped run does not park every rank as save k ends
    (`Capabilities.parks`: a script's ranks go on to their next save, the
    ranks that did not save until the group is torn down) leaves something
    other than the golden trace cut at the save's end after a crash, or
    before a power loss right after the save: those cases run."""
    if not baseline.target.caps.parks and case.kind in ("crash", "crash-after", POWER_LOSS_AFTER):
        return None
    if any(f.index is None for f in case.faults):  # a point the golden run did not reach: no trace to cut
        return None
    if case.kind == "crash" or case.kind == "crash-after":
        returned = _derived_crash(baseline, case, ckpt)
        return None if returned is None else (returned, None)
    return _derived_power_loss(baseline, case, ckpt)


def _derived_crash(baseline: Baseline, case: Case, ckpt: Path) -> Optional[bool]:
    """What a SIGKILL of one rank leaves, when the golden trace decides what
    its peers do: every collective a peer still makes was completed by the
    crashed rank too, so no peer ever notices the crash, and each ends its
    save (or the run) as in the golden run; the kernel keeps every operation
    that completed. A peer that would wait on the dead rank instead gets an
    error and runs the job's own error handling, which no trace has seen: such
    cases, and cuts inside a run of kernel writes, get a real faulted run."""
    if len(case.faults) != 1:
        return None
    fault = case.faults[0]
    ranks = {r.rank: r.events for r in baseline.golden.ranks}
    mine = ranks.get(fault.rank, ())
    at = next((i for i, e in enumerate(mine) if e.phase == fault.phase and e.point is not None
               and e.point <= fault.index < e.point + e.count), None)
    if at is None or mine[at].fields.get("process"):
        return None  # a crash of a process the rank spawned to save: the rank goes on, and learns of it
    ops = mine[at].ops
    done = ops[:fault.index - mine[at].point + (fault.kind == "crash-after")]
    if len(done) == len(ops):
        cut = at + 1
    elif all(op in durability.NO_EFFECT for op in done):
        cut = at
    else:
        return None  # the kernel writes of one batched event, cut in between
    kept = list(mine[:cut])
    completed = _collectives(kept)
    stopped = fault.phase == baseline.phase  # the faulted run parks every rank after save k
    for rank, events in ranks.items():
        if rank != fault.rank:
            rest = _through(events, baseline.phase) if stopped else events
            if _collectives(rest) > completed:
                return None
            kept += rest
    durability.write_snapshot(ckpt, durability.process_crash(durability.Snapshot(), fields(kept),
                                                             data_reader(baseline.golden.run_dir)))
    return not stopped


def _collectives(events: Sequence[Event]) -> int:
    return sum(e.kind is EventKind.COLLECTIVE and e.point is not None for e in events)


def _derived_power_loss(baseline: Baseline, case: Case, ckpt: Path) -> Optional[tuple[bool, durability.PowerLoss]]:
    """What a power loss leaves, from the golden run's trace instead of a
    faulted run: every rank stops at that moment, so nothing any rank would
    do next matters, and the golden run logged every byte. Returns whether
    save k had returned on every rank, and the loss applied to `ckpt`; None
    for a case the trace does not decide (several faults, another kind)."""
    ranks = {r.rank: r.events for r in baseline.golden.ranks}
    if case.kind == POWER_LOSS_AFTER:  # each rank as it parks once save k returned
        records = [e.fields for events in ranks.values() for e in _through(events, baseline.phase)]
        returned = True
    elif len(case.faults) == 1 and case.faults[0].kind == "power-loss":
        fault = case.faults[0]
        at = next((e for e in ranks.get(fault.rank, ()) if e.phase == fault.phase and e.point == fault.index), None)
        if at is None or at.count != 1:
            return None
        records = durability.events_before([e.fields for events in ranks.values() for e in events], at.t)
        returned = fault.phase != baseline.phase
    else:
        return None
    return returned, durability.apply_power_loss(ckpt, durability.Snapshot(), records,
                                                 data_reader(baseline.golden.run_dir), baseline.plan.durability)


def _through(events: Sequence[Event], phase: str) -> Sequence[Event]:
    """A rank's events up to the end of `phase`."""
    last = max((i for i, e in enumerate(events) if e.phase == phase), default=-1)
    return events[:last + 1]


def _resume(baseline: Baseline, case: Case, ckpt: Path, run_dir: Path, clock: CaseClock) -> tuple[Run, Optional[str]]:
    """The resume from `ckpt`, shared with every case that left the same
    directory (`resumes`); and the case it is shared with, if not this one
    (then its seconds are that case's, and waiting for it this one's harness time)."""
    def resume() -> Run:
        return clock.run(lambda: baseline.target.run(
            RunRequest("resumed run", trace_files=False, failure_grace=PROPAGATION), ckpt, run_dir), resume=True)

    if not baseline.plan.share_resumes:
        return resume(), None
    return baseline.resumes.once(DirState.of(ckpt), resume, case.name)


def _undelayed(baseline: Baseline, case: Case) -> Optional[oracle.Outcome]:
    """How the run a delay case delays resumes without the delay: the same
    stop, no fault, and the resume of what it left (shared with any case that
    left the same directory). A delay alone must change nothing, so that, not
    S_k, is what the case must end as: a job that deletes its newest
    checkpoint at the end by design (the Trainer's non-best one) leaves no
    S_k either way. None if the undelayed run itself failed. Its seconds are
    the harness's part of the case that makes it."""
    stop = _stop(baseline, case)

    def make() -> Optional[oracle.Outcome]:
        root = fresh_dir(baseline.root / "undelayed", f"stop{stop}" if stop is not None else "end")
        run = baseline.target.run(RunRequest("undelayed run", stop_after_save=stop, trace_files=False,
                                             failure_grace=PROPAGATION), root / "ckpt", root / "run")
        if not run.ok:
            return None
        resumed, _ = _resume(baseline, case, root / "ckpt", root / "resume", CaseClock())  # timed apart
        ref, values = baseline.reference, baseline.target.values
        return oracle.classify_resume(resumed, ref.saved, ref.k, ref.prev, ends_group=ends_group(values))

    found, _ = baseline.undelayed.once(stop, make, case.name)
    return found


def _stop(baseline: Baseline, case: Case) -> Optional[int]:
    """Where a faulted run stops: right after save k, or at the end for a
    fault after save k (in the end of the run: it must go on past it)."""
    return baseline.k if all(phase.foreground(f.phase) == baseline.phase for f in case.faults) else None


def _explain_power_loss(result: CaseResult, lost: Optional[durability.PowerLoss], mode: str) -> CaseResult:
    """Say why the power loss dropped what it dropped: the resume's outcome
    alone ("refused", "S_prev") does not tell which fsync was missing."""
    if lost is None or not lost.losses:
        return result
    listing = "\n".join(f"  {loss}" for loss in lost.losses)
    details = f"what the power loss ({mode} durability model) {findings.LOSSES}{listing}"
    summary = result.summary if result.verdict.ok else f"{result.summary}{findings.LOST}{lost.explain(1)}"
    return dataclasses.replace(result, summary=summary,
                               details=f"{details}\n\n{result.details}" if result.details else details)


def _faulted_run(baseline: Baseline, case: Case, ckpt: Path, run_dir: Path,
                 clock: CaseClock) -> tuple[Run, Optional[durability.PowerLoss]]:
    plan = baseline.plan
    kinds = {f.kind for f in case.faults} | {case.kind}
    power = bool(kinds & {"power-loss", POWER_LOSS_AFTER})
    blocked_grace = plan.hang_timeout if kinds & BLOCKING.keys() else None
    stop = _stop(baseline, case)
    # A notice's grace is the scheduler's to end, not the harness's: neither a rank its SIGTERM ended
    # first nor the deadline may have the others cut while their handlers still write.
    grace = max((f.seconds for f in case.faults if BY_NAME[f.kind].lasts == "grace"), default=0.0)
    timeout = baseline.target.values.get("timeout")
    run = clock.run(lambda: baseline.target.run(
        RunRequest("faulted run", stop_after_save=stop, faults=case.faults, log_data=power,
                   blocked_grace=blocked_grace, failure_grace=PROPAGATION + grace,
                   deadline=timeout + grace if grace and timeout else None), ckpt, run_dir),
        broken=baseline.k)
    if power:
        events = run.events()
        records = fields(events)
        moment = min((e.t for e in events if e.fault == "power-loss"), default=None)
        if moment is not None:  # the machine stopped there: nothing after it happened
            records = durability.events_before(records, moment)
        return run, durability.apply_power_loss(ckpt, durability.Snapshot(), records, data_reader(run_dir),
                                                plan.durability)
    return run, None

