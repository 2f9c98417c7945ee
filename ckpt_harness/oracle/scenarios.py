"""Judging the catalogue's own situations: overwrite, stalled ranks, world-size change.

Each judge reads runs and file snapshots and returns the case's result; a
judge that returns None has found nothing wrong yet and leaves the next run
to the check (e.g. the resume after an overwrite).
"""

from __future__ import annotations

from typing import Mapping, Optional, Sequence

from ckpt_harness.oracle.judges import Reference, States, judge_finished, judge_same_state
from ckpt_harness.oracle.outcomes import OutcomeKind, classify_resume, failure_outcome, group_ended
from ckpt_harness.oracle.problems import health, never_fired, rank_state
from ckpt_harness.oracle.start import infer_start
from ckpt_harness.launch import RankStatus
from ckpt_harness.records import Kind
from ckpt_harness.records.runs import RankRun, Run
from ckpt_harness.state import Record
from ckpt_harness.verdict import CaseResult, Verdict

#: relative path -> digest of its bytes
Snapshot = Mapping[str, str]


def _result(case: str, check: str, label: str, repro: Optional[str]):
    def result(verdict: Verdict, summary: str, details: str = "") -> CaseResult:
        return CaseResult(case, check, verdict, f"{label}: {summary}", details,
                          repro if verdict is not Verdict.PASS else None)

    return result


# -- overwrite ----------------------------------------------------------------------------
def judge_overwriting_save(case: str, check: str, run: Run, *, label: str, state: str, flag: bool,
                           earlier_saved: Optional[States], before: Snapshot, after: Snapshot,
                           committed: Snapshot, tops: list[str], repro: Optional[str],
                           ends_group: bool = True, ref: Optional[Reference] = None) -> Optional[CaseResult]:
    """A save into a directory an earlier run left (`before`, now `after`).
    `ends_group`: a refusal that ended some ranks while the rest waited for
    them is a refusal of the whole under an elastic launcher (`failure_outcome`).

    Accepted: a refusal on every rank that changed no file (unless overwrite
    was asked of a complete directory: the flag ignored), a resume of a
    complete directory as found, or a replacement with no file of the earlier
    run left, which returns None: its resume is judged next. A target that
    reports no load (a script) resumed if its saves say so (`infer_start`
    over `ref`'s save steps); then only its end is compared, with `ref`'s."""
    result = _result(case, check, label, repro)
    complete = state == "complete"
    loaded = {s for s in run.loaded_steps().values() if s is not None}
    inferred = infer_start(run, sorted(ref.saved)) if ref is not None and not run.loaded_steps() else None
    if inferred is not None and inferred.step is not None and not inferred.fresh:
        if complete and health(run) is None:
            final = judge_finished(case, ref.final_after(inferred.step), run, "final state vs. uninterrupted run")
            if final.verdict is Verdict.PASS:
                return result(Verdict.PASS, f"resumed the complete checkpoint it found instead of writing over it "
                                            f"({inferred.evidence}), and ended bitwise")
            return result(Verdict.FAIL, f"resumed the checkpoint it found ({inferred.evidence}), then "
                                        f"{final.summary}", final.details)
        return result(Verdict.FAIL, f"resumed from the {state} directory an earlier run left ({inferred.evidence})")
    if loaded:
        if complete and earlier_saved is not None and health(run) is None:
            same = judge_same_state(case, check, earlier_saved, run.states(Kind.LOADED),
                                    "state after load vs. the earlier run's save", None)
            if same.verdict is Verdict.PASS:
                return result(Verdict.PASS, "resumed the complete checkpoint it found instead of writing over it")
            return result(Verdict.FAIL, f"resumed the checkpoint it found, wrongly: {same.summary}", same.details)
        return result(Verdict.FAIL, f"resumed from the {state} directory an earlier run left "
                                    f"(load() returned {sorted(loaded)})")
    problem = health(run)
    if problem is not None:
        refused = (not run.outcome.timed_out and all(r.status.ended_badly for r in run.ranks)) or (
            ends_group and group_ended(run))
        if not refused:
            return result(Verdict.FAIL, problem.summary, problem.details)
        changed = [f for f in before if after.get(f) != before[f]]
        message = failure_outcome(run, ends_group=ends_group).detail
        if changed:
            return result(Verdict.FAIL, f"refused, but only after changing {few(changed)}: {message}")
        if flag and complete:
            return result(Verdict.FAIL, f"overwrite=True ignored: the save refused: {message}")
        return result(Verdict.PASS, f"refused on every rank, directory untouched: {message}")
    under = lambda f: f.split("/")[0] in tops  # noqa: E731
    stale = [f for f in after if under(f) and f not in committed]
    kept = [f for f in after if under(f) and before.get(f) == after[f] and committed.get(f) != after[f]]
    if stale or kept:
        return result(Verdict.FAIL, f"stale files of the earlier run left in place: "
                                    f"{few(list(dict.fromkeys(stale + kept)))}")
    return None


def judge_replaced(case: str, check: str, resumed: Run, ref: Reference, *, label: str,
                   repro: Optional[str]) -> CaseResult:
    """The resume after a save that replaced the directory: S_k, then bitwise to the end."""
    result = _result(case, check, label, repro)
    outcome = classify_resume(resumed, ref.saved, ref.k, None)
    if outcome.kind is not OutcomeKind.S_K:
        problem = health(resumed)
        return result(Verdict.FAIL, f"replaced, but the resume gave {outcome}", problem.details if problem else "")
    final = judge_finished(case, ref.final_after(ref.k), resumed, "final state vs. uninterrupted run")
    if final.verdict is not Verdict.PASS:
        return result(Verdict.FAIL, f"replaced and resumed, then {final.summary}", final.details)
    return result(Verdict.PASS, "replaced with no stale file; resumed bitwise")


def few(paths: list[str], limit: int = 3) -> str:
    return ", ".join(paths[:limit]) + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


# -- stalled ranks -------------------------------------------------------------------------
def judge_late(case: str, check: str, run: Run, final: Optional[States], *, label: str,
               repro: Optional[str]) -> CaseResult:
    """One rank late: the run must end exactly as without the delay."""
    result = _result(case, check, label, repro)
    if not run.fired():
        return result(Verdict.UNKNOWN, never_fired(run))
    problem = health(run)
    if problem is not None:
        return result(Verdict.FAIL, problem.summary, problem.details)
    same = judge_same_state(case, check, final, run.states(Kind.FINAL), "final state vs. the run without delay", None)
    if same.verdict is not Verdict.PASS:
        return result(Verdict.FAIL, same.summary, same.details)
    return result(Verdict.PASS, f"the run finished as without the delay ({same.summary})")


def judge_blocked(case: str, check: str, run: Run, blocked: int, budget: float, *, label: str,
                  repro: Optional[str]) -> CaseResult:
    """Rank `blocked` stopped for good: every other rank must raise within `budget` seconds."""
    result = _result(case, check, label, repro)
    if not run.fired():
        return result(Verdict.UNKNOWN, never_fired(run))
    blind = [r.rank for r in run.ranks if r.status is RankStatus.HUNG and r.outcome.stack is None]
    if blind:
        return result(Verdict.UNKNOWN, f"the harness got no stack from rank(s) {blind}: cannot report the hang")
    peers = [r for r in run.ranks if r.rank != blocked]
    if all(r.status.ended_badly for r in peers):
        first = next((r.error for r in peers if r.error), None)
        said = f": {first}" if first else ""
        return result(Verdict.PASS, f"every other rank raised within {budget:g}s{said}")
    problem = health(run)
    return result(Verdict.FAIL, problem.summary if problem else "", problem.details if problem else "")


def judge_frozen_writer(case: str, check: str, run: Run, rank: int, budget: float, *, label: str,
                        repro: Optional[str]) -> CaseResult:
    """The writer of rank `rank`'s final save froze for good (the rank's
    main thread did not): every rank must end within `budget` seconds of it,
    by raising (a wait with a timeout) or by finishing. One still running
    then waits for the frozen writer, or for a peer that does: a hang,
    reported with every thread's stack, the trainer's and the writer's."""
    result = _result(case, check, label, repro)
    if not run.fired():
        return result(Verdict.UNKNOWN, never_fired(run))
    running = [r for r in run.ranks if r.status is RankStatus.HUNG]
    if any(r.outcome.stack is None for r in running):
        blind = [r.rank for r in running if r.outcome.stack is None]
        return result(Verdict.UNKNOWN, f"the harness got no stack from rank(s) {blind}: cannot report the hang")
    if not running:
        ended = "; ".join(_ending(r) for r in run.ranks)
        return result(Verdict.PASS, f"every rank ended within {budget:g}s of the frozen writer: {ended}")
    problem = health(run)
    waits = f"rank {rank} waited for its frozen writer for good (give the wait a timeout and raise)"
    return result(Verdict.FAIL, f"{waits}: {problem.summary if problem else 'hang'}",
                  problem.details if problem else "")


def _ending(r: RankRun) -> str:
    return f"rank {r.rank} {'finished' if r.status is RankStatus.OK else rank_state(r)}"


# -- world-size change -----------------------------------------------------------------------
#: What a script whose full state function raised is told.
FIX_FULL_STATE = "fix the function given to ckpt_harness.full_state: it must return the state, as it is"


def saved_full(run: Run, k: int, savers: Optional[frozenset[int]] = None) -> Optional[Mapping]:
    """The full state record save `k` left (`Kind.SAVED_FULL`, equal on every
    rank that made it: the lowest one's); None if one of `savers` (None:
    every rank) lacks it."""
    found = [r.find(Kind.SAVED_FULL, k) for r in run.ranks if savers is None or r.rank in savers]
    return found[0] if found and all(found) else None


def _full_state_raised(run: Run, kind: Kind) -> Optional[str]:
    """What a script's full state function raised in `run`, if it did (`rankside.script`)."""
    return next((f"rank {r.rank}: {rec['failed']}" for r in run.ranks for rec in r.records
                 if rec["event"] == kind and rec.get("failed")), None)


def judge_reshard_save(case: str, check: str, saved: Run, k: int, n: int, repro: Optional[str],
                       savers: Optional[frozenset[int]] = None) -> Optional[CaseResult]:
    """The run that saves at `n` ranks; None if it left save k (made by
    `savers`, None: every rank) to resume from."""
    problem = health(saved)
    if problem is not None:
        return CaseResult(case, check, Verdict.FAIL, f"the run at world size {n} failed: {problem.summary}",
                          problem.details, repro)
    raised = _full_state_raised(saved, Kind.SAVED_FULL)
    if raised is not None:
        return CaseResult(case, check, Verdict.ERROR, f"the full state could not be recorded at save {k}, {raised}: "
                                                      f"{FIX_FULL_STATE}", repro=repro)
    if saved_full(saved, k, savers) is None:
        return CaseResult(case, check, Verdict.UNKNOWN, f"save {k} never returned on every rank at world size {n}: "
                                                        "nothing to resume at another world size", repro=repro)
    return None


def judge_reshard(case: str, check: str, saved: Run, resumed: Run, k: int, n: int, m: int,
                  repro: Optional[str], *, reports: bool = True, save_steps: Sequence[int] = (),
                  savers: Optional[frozenset[int]] = None) -> CaseResult:
    """Save k at `n` ranks, resumed at `m`: the full state bitwise, then the
    run finishes. `reports`, `save_steps`: as `judge_full_resume` takes them."""
    expected = saved_full(saved, k, savers)
    assert expected is not None, "judge_reshard_save passed it"
    return judge_full_resume(case, check, expected["state"], resumed, k, reports=reports, save_steps=save_steps,
                             label=f"resume at world size {m}", what=f"full state at world size {m} vs. saved at {n}",
                             passed=f"save {k} at {n} ranks resumed at {m}", repro=repro)


def judge_full_resume(case: str, check: str, expected: Record, resumed: Run, k: int, *, label: str, what: str,
                      passed: str, repro: Optional[str], reports: bool = True,
                      save_steps: Sequence[int] = ()) -> CaseResult:
    """A resume judged on the state that does not depend on the world size
    (`Job.full_state`, `ckpt_harness.full_state`): it loaded save `k`,
    bitwise `expected` on every rank, then trained to its end. `label`
    names the resume in a failure, `what` the comparison, `passed` the case
    in a pass. A target that `reports` says where it loaded (`ctx.loaded`,
    with its full state); where one that does not (a script) started is
    read from what it did (`oracle.start`, against `save_steps`), and its
    state after load is the one at its first module forward."""
    def fail(summary: str, details: str = "") -> CaseResult:
        return CaseResult(case, check, Verdict.FAIL, summary, details, repro)

    loaded = resumed.states(Kind.LOADED_FULL)
    problem = health(resumed)
    raised = _full_state_raised(resumed, Kind.LOADED_FULL)
    if raised is not None:
        return CaseResult(case, check, Verdict.ERROR, f"{label}: the state after load could not be recorded, "
                                                      f"{raised}: {FIX_FULL_STATE}", repro=repro)
    if loaded is None and (problem is not None or reports):
        return fail(f"{label}: {problem.summary if problem else 'no state after load'}",
                    problem.details if problem else "")
    if reports:
        steps = set(resumed.loaded_steps().values())
        if steps != {k}:
            return fail(f"{label}: load() returned {sorted(steps, key=str)}, expected {k}")
    else:
        inferred = infer_start(resumed, save_steps)
        if inferred.step is not None and inferred.step != k:
            started = "it started from scratch" if inferred.fresh else f"it resumed from step {inferred.step}"
            return fail(f"{label}: {started}, expected step {k} ({inferred.evidence})")
    if loaded is None:
        return CaseResult(case, check, Verdict.UNKNOWN,
                          f"{label}: the state it loaded was not recorded: it is taken at the first module forward "
                          "after ckpt_harness.full_state was declared, and the run made none", repro=repro)
    same = judge_same_state(case, check, {r: expected for r in loaded}, loaded, what, repro)
    if same.verdict is not Verdict.PASS:
        return same
    if problem is not None:
        return fail(f"{label}, then {problem.summary}", problem.details)
    return CaseResult(case, check, Verdict.PASS, f"{passed}: {same.summary}")
