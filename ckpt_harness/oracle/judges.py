"""Judging runs: liveness, loads, bitwise states, and resumes after a fault.

For a resume after save k the reference is the state a stopped run had
right after save k returned (what is in that directory), not the golden
run's: if the two differ the job is not deterministic, which is reported as
such (UNKNOWN) instead of being blamed on the checkpoint.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Mapping, Optional, Sequence

from ckpt_harness.inject.faults import BLOCKING
from ckpt_harness.inject.payload import Ran
from ckpt_harness.oracle import diffs
from ckpt_harness.oracle.causes import severity
from ckpt_harness.oracle.outcomes import PEERS_ENDED, Outcome, OutcomeKind, classify_resume, group_ended
from ckpt_harness.oracle.problems import health, never_fired
from ckpt_harness import phase
from ckpt_harness.oracle.properties import (ERRORS, Background, accepted, accepted_background, expected,
                                            expected_background, property_for)
from ckpt_harness.errors import HarnessError
from ckpt_harness.launch import RankStatus
from ckpt_harness.records import Kind
from ckpt_harness.records.runs import Run, save_steps_by_rank, saving_after
from ckpt_harness.state import Record
from ckpt_harness.verdict import PRECEDENCE, CaseResult, StateDiff, Verdict, fold

States = Mapping[int, Record]


def informational(result: CaseResult, why: str) -> CaseResult:
    """`result` as information: a judgment no property promises (`why`) is
    no failure of the checkpointing under test, so a FAIL (or an undecided
    one) is a PASS whose summary says what it would have been; its details,
    differences and repro stay, for whoever wants to know."""
    if result.verdict.ok:
        return result
    return dataclasses.replace(result, verdict=Verdict.PASS, also=(),
                               summary=f"for information, {why}: {result.verdict.value.upper()} {result.summary}")


def judge_refused(case: str, run: Run, repro: Optional[str]) -> Optional[CaseResult]:
    """A PASS where `run`, resumed under other releases than those that
    wrote its checkpoint (an upgrade@K or downgrade@K case), refused it: some rank raised an
    exception of its own, every other rank ended badly too (by that
    exception, or ended by the launcher for it), and no rank saved anything.
    That is what upgrade-safe accepts besides a bitwise resume; None for any
    other run, judged as every resume is. A rank that died by a signal of
    its own crashed rather than refused; a run that trained on to a save
    did not refuse."""
    own = [r for r in run.ranks if r.status is RankStatus.FAILED and r.error is not None
           and not r.outcome.ended_by_launcher]
    if not own or not all(r.status.ended_badly for r in run.ranks) or any(
            r.status is RankStatus.CRASHED and not r.outcome.ended_by_launcher for r in run.ranks) or any(
            rec["event"] == Kind.SAVED for r in run.ranks for rec in r.records):
        return None
    ranks = ", ".join(str(r.rank) for r in own)
    return CaseResult(case, "refused", Verdict.PASS,
                      f"{run.name}: refused the checkpoint the other releases wrote, before saving anything "
                      f"(rank {ranks}: {own[0].error})", details=own[0].error.traceback, repro=repro)


def judge_live(case: str, run: Run, repro: Optional[str]) -> CaseResult:
    problem = health(run)
    if problem is None:
        return CaseResult(case, "live", Verdict.PASS, f"{run.name}: all ranks finished in {run.outcome.elapsed:.2f}s")
    return CaseResult(case, "live", Verdict.FAIL, f"{run.name}: {problem.summary}", problem.details, repro)


def judge_golden(case: str, run: Run, repro: Optional[str], noun: str = "job") -> CaseResult:
    """A run with nothing armed, that every other is judged against.

    If it breaks in a save or a load, that is the checkpointing under test
    (the final save that hangs): live FAIL. Anywhere else (setup, a train
    step, the job's `state`, a deadline too short for the job) the job
    cannot run at all, which says nothing about its checkpoints: ERROR.
    `noun` is what the target is called ("job", "script"): the words are about it.
    """
    problem = health(run)
    if problem is None or problem.checkpointing:
        return judge_live(case, run, repro)
    where = ("at its exit, every rank's script returned" if any(r.outcome.exiting for r in run.ranks) else
             "before its first save" if not any(rec["event"] == Kind.SAVED for r in run.ranks for rec in r.records)
             else "outside its saves and loads")
    return CaseResult(
        case, "live", Verdict.ERROR,
        f"{run.name}: the {noun} fails with no fault armed, {where} ({problem.summary}); "
        f"nothing can be judged until it runs: fix the {noun}, or give it a longer timeout if it was only slow",
        problem.details, repro)


def judge_flake(n: int, judged: Sequence[CaseResult], repro: Optional[str]) -> CaseResult:
    """`n` fault-free runs, each judged as the golden one is (`judge_golden`),
    as one case: a race between ranks (two renaming one path, a pointer
    written through one temporary name) passes most runs and fails some.
    FAIL if one failed in the checkpointing, the worst of them otherwise,
    PASS if none did. `judged`: the runs' judgments, in order."""
    failed = [r for r in judged if not r.verdict.ok]
    if not failed:
        return CaseResult("flake", "live", Verdict.PASS, f"{n} fault-free runs: every one finished and saved")
    shown = ", ".join(r.case for r in failed)
    return CaseResult("flake", "live", fold(r.verdict for r in failed),
                      f"{len(failed)} of {n} fault-free runs did not pass ({shown}): {failed[0].summary}", repro=repro)


def judge_fresh_start(case: str, run: Run, repro: Optional[str]) -> CaseResult:
    steps = run.loaded_steps()
    wrong = {r: s for r, s in steps.items() if s is not None}
    if len(steps) == len(run.ranks) and not wrong:
        return CaseResult(case, "fresh start", Verdict.PASS, "load() returned None on an empty directory")
    if wrong:
        said = ", ".join(f"{s} on rank {r}" for r, s in sorted(wrong.items()))
        return CaseResult(case, "fresh start", Verdict.FAIL,
                          f"load() on an empty checkpoint directory returned {said}", repro=repro)
    return CaseResult(case, "fresh start", Verdict.FAIL, "the job never reported its load (ctx.loaded)", repro=repro)


def undecided_if(nondeterminism: Optional[CaseResult], result: CaseResult) -> CaseResult:
    """A comparison with an uninterrupted run means nothing if two
    uninterrupted runs already differ: downgrade its failure to UNKNOWN."""
    if nondeterminism is None or result.verdict is not Verdict.FAIL:
        return result
    return dataclasses.replace(result, verdict=Verdict.UNKNOWN, summary=f"(job not deterministic) {result.summary}")


def judge_load_step(case: str, resumed: Run, step: int, repro: Optional[str]) -> CaseResult:
    steps = resumed.loaded_steps()
    wrong = {r: s for r, s in steps.items() if s != step}
    silent = [r.rank for r in resumed.ranks if r.rank not in steps]
    if not silent and not wrong:
        return CaseResult(case, "load step", Verdict.PASS, f"load() returned {step} on every rank")
    if not steps:
        return CaseResult(case, "load step", Verdict.FAIL, "the job never reported its load (ctx.loaded)", repro=repro)
    said = [f"load() returned {'None (a silent fresh start)' if s is None else s} on rank {r}"
            for r, s in sorted(wrong.items())]
    said += [f"rank {r} never reported its load" for r in silent]
    return CaseResult(case, "load step", Verdict.FAIL, f"{'; '.join(said)}; expected {step}", repro=repro)


def judge_same_state(case: str, check: str, expected_states: Optional[States], actual: Optional[States],
                     what: str, repro: Optional[str]) -> CaseResult:
    if expected_states is None or actual is None:
        return CaseResult(case, check, Verdict.FAIL, f"no {what} recorded on every rank", repro=repro)
    problems = diffs.by_rank(expected_states, actual)
    if not problems:
        keys = len(next(iter(expected_states.values()), {}))
        return CaseResult(case, check, Verdict.PASS, f"bitwise equal on every rank ({keys} keys each)")
    rows = diffs.rows(problems)
    worst = severity(rows)
    said = f" ({worst.label})" if worst is not None else ""
    return CaseResult(case, check, Verdict.FAIL, f"{what} differs{said}: {_first(problems)}", _list(problems), repro,
                      differences=rows)


def harness_error(case: str, check: str, error: BaseException, repro: Optional[str] = None,
                  row: Callable[[Outcome], tuple[str, ...]] = lambda outcome: ()) -> CaseResult:
    """The harness could not run or model this case: ERROR, never FAIL."""
    import traceback

    details = "" if isinstance(error, HarnessError) else "".join(traceback.format_exception(error))
    return CaseResult(case, check, Verdict.ERROR, f"the harness could not run this case: {type(error).__name__}: "
                                                   f"{error}", details, repro, row(Outcome(OutcomeKind.NO_LOAD)))


def nothing_to_break(phase: str, repro: Optional[str], marks_saves: str) -> CaseResult:
    """UNKNOWN: save k made no operation to break; `marks_saves` says how the
    target's saves are seen (`Capabilities.marks_saves`)."""
    return CaseResult("golden", "trace", Verdict.UNKNOWN,
                      f"no operation was recorded in phase {phase!r}: nothing to break; {marks_saves}", repro=repro)


# -- a resume after a fault ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Reference:
    """What a resume after breaking save k is judged against (from the golden run)."""

    #: step -> rank -> state recorded right after that save returned.
    saved: Mapping[int, States]
    k: int
    prev: Optional[int]
    final: Optional[States]
    #: Where a rank's final state is its last save's (a script, not
    #: `Capabilities.live_state`): each rank's save steps
    #: (`records.runs.save_steps_by_rank`); None: the job's live state at its end.
    final_savers: Optional[Mapping[int, Sequence[int]]] = None

    def final_after(self, step: Optional[int]) -> Optional[States]:
        """The final state a run resumed from save `step` is judged against:
        on the ranks that save after `step` (`records.runs.saving_after`) where a
        rank's final state is its last save's, else all of it."""
        if self.final is None or self.final_savers is None or step is None:
            return self.final
        later = saving_after(self.final_savers, step)
        return {rank: state for rank, state in self.final.items() if rank in later}


def judge_fault(case: str, kind: str, ref: Reference, faulted: Optional[Run], resumed: Run, *,
                save_returned: bool, detail: str, repro: Optional[str],
                row: Callable[[Outcome], tuple[str, ...]] = lambda outcome: (),
                ran: Sequence[Ran] = (), background: Optional[Background] = None,
                ends_group: bool = True, undelayed: Optional[Outcome] = None) -> CaseResult:
    """The verdict on one fault case under each property it judged: the one
    its fault kind judges, and live or faithful when the runs around it broke
    those too. The worst leads (the table's row); the others ride along in
    `CaseResult.also`, so that a matrix cell holds only the cases that broke
    its own property (an error that reached one rank only is a `live`
    finding, not a `preserving` one, when the previous checkpoint survived;
    so is a rank left waiting for good for one the fault blocked, whatever
    the kind: `_left_waiting`).

    `faulted` is the run with the fault armed (None when the directory was
    damaged after the fact); `save_returned` whether save k returned on every
    rank there; `row(outcome)` the report's table cells; `ran` the processes
    that ran a payload planted in the checkpoint (safe-loading). `background`,
    for a job that saves in the background, replaces `save_returned` for
    "atomic" and "preserving" by which save had been published (`Background`).
    `ends_group`: production's launcher ends the group when a worker exits
    with an error (`config.ends_group`), so an error that ended one rank while
    its peers waited for it is not a hang (`outcomes.group_ended`).
    `undelayed`: for a case that only delays, how the same run without the
    delay resumed; the case must resume alike (a delay alone changes nothing),
    whatever that is. Without it, S_k."""
    prop = property_for(kind)
    outcome = classify_resume(resumed, ref.saved, ref.k, ref.prev, ends_group=ends_group)
    summary = f"{detail} → {outcome}"

    def result(check: str, verdict: Verdict, why: str = "", details: str = "",
               differences: tuple[StateDiff, ...] = ()) -> CaseResult:
        return CaseResult(case, check, verdict, f"{summary}{'; ' + why if why else ''}", details,
                          repro if verdict is not Verdict.PASS else None, row(outcome), differences=differences,
                          outcome=outcome.kind.value)

    if prop == "safe-loading":
        return _judge_safe_loading(result, resumed, outcome, ran, ends_group)
    if faulted is not None and not faulted.fired():
        problem = health(faulted)
        window = {phase.save(ref.k), phase.after_save(ref.k)}  # the case's: the save it breaks, the work after it
        failed_in = {phase.foreground(r.phase) for r in faulted.ranks if r.status.ended_badly and r.phase}
        if problem is not None and failed_in and failed_in <= window and not faulted.outcome.timed_out:
            # The run took another path than the golden one and failed there by itself, in the window
            # the fault aimed at: what it aimed at (a race between ranks) happened without it.
            return result(prop, Verdict.FAIL, "the fault never fired: the run took another path than the golden "
                          f"one and failed there by itself ({problem.summary})", problem.details)
        return result(prop, Verdict.UNKNOWN, never_fired(faulted))
    judged: list[CaseResult] = []
    alive = ""  # why the faulted run's stuck peers are no hang under this launcher
    if faulted is not None and kind in ERRORS:
        stuck = faulted.outcome.stuck_after_failure or (
            faulted.outcome.timed_out and any(r.status is RankStatus.FAILED for r in faulted.ranks))
        problem = health(faulted)
        if stuck and ends_group and group_ended(faulted):
            ended = [r.rank for r in faulted.ranks if r.status.ended_badly]
            alive = f"the error ended rank{'s' * (len(ended) > 1)} {', '.join(map(str, ended))}; {PEERS_ENDED}"
        elif stuck:
            judged.append(result("live", Verdict.FAIL,
                                 "the error did not reach every rank: " + (problem.summary if problem else "")
                                 + ("" if ends_group else " (launcher = plain: nothing ends the peers of a rank "
                                                          "that exited)"),
                                 problem.details if problem else ""))
        elif faulted.outcome.timed_out:  # no rank ended: the one that got the error lived on, and no launcher sees it
            judged.append(result("live", Verdict.FAIL, _lived_on(faulted) + (problem.summary if problem else "hang"),
                                 problem.details if problem else ""))
    waiting = _left_waiting(faulted) if faulted is not None else None
    if waiting is not None and not any(j.check == "live" and j.verdict is Verdict.FAIL for j in judged):
        problem = health(faulted)
        judged.append(result("live", Verdict.FAIL, waiting + (problem.summary if problem else "hang"),
                             problem.details if problem else ""))
    if kind == "delay" and faulted is not None and not faulted.ok:
        problem = health(faulted)
        return result("skew-safe", Verdict.FAIL, problem.summary if problem else "", problem.details if problem else "")
    judged += _judge_resume(result, prop, kind, ref, faulted, resumed, outcome, save_returned, background, case,
                            undelayed)
    if alive:
        judged.append(result("live", Verdict.PASS, alive))
    worst = min(range(len(judged)), key=lambda i: PRECEDENCE.index(judged[i].verdict))  # the first on a tie
    return dataclasses.replace(judged[worst], also=tuple(j for i, j in enumerate(judged) if i != worst))


def _judge_resume(result: Callable[..., CaseResult], prop: str, kind: str, ref: Reference, faulted: Optional[Run],
                  resumed: Run, outcome: Outcome, save_returned: bool, background: Optional[Background],
                  case: str, undelayed: Optional[Outcome] = None) -> list[CaseResult]:
    """What the resume says: live if it hung or failed on some ranks, then
    `prop` (which checkpoint it resumed), then faithful (how it ended)."""
    if outcome.kind in (OutcomeKind.HANG, OutcomeKind.SOME_ERRORS):
        problem = health(resumed)
        return [result("live", Verdict.FAIL, "", problem.details if problem else "")]
    if outcome.kind is OutcomeKind.NO_LOAD:
        if resumed.loaded_steps():  # some ranks reported a load and others not
            return [result(prop, Verdict.FAIL, "some ranks never reported their load")]
        return [result(prop, Verdict.UNKNOWN)]  # no rank did, and nothing it did says where it resumed
    if undelayed is not None and prop == "skew-safe":
        if (outcome.kind, outcome.step) != (undelayed.kind, undelayed.step):
            return [result(prop, Verdict.FAIL, f"expected what the run resumed without the delay: {undelayed}")]
    elif background is not None and prop in ("atomic", "preserving"):
        if not accepted_background(outcome, background, ref.k):
            why = "expected " + expected_background(background, ref.k)
            return [result(prop, Verdict.FAIL, why + _unsurfaced(kind, faulted))]
    elif not accepted(prop, outcome, save_returned, ref.prev is not None):
        return [result(prop, Verdict.FAIL, "expected " + expected(prop, save_returned, ref.prev is not None))]
    judged = [result(prop, Verdict.PASS)]
    if outcome.kind.resumed:
        final = ref.final_after(outcome.step)
        faithful = judge_finished(case, final, resumed, "final state vs. uninterrupted run")
        faithful = float_noise(faithful, final, _ranks_of(resumed.states(Kind.FINAL), final),
                               loaded_bitwise=resumed.states(Kind.LOADED) is not None)
        if faithful.verdict is not Verdict.PASS:
            judged.append(result("faithful", faithful.verdict, faithful.summary, faithful.details,
                                 faithful.differences))
    return judged


def _judge_safe_loading(result: Callable[..., CaseResult], resumed: Run, outcome: Outcome,
                        ran: Sequence[Ran], ends_group: bool = True) -> CaseResult:
    """FAIL if any process of the resume ran the planted payload; otherwise
    whatever the job did with the file (refused it, fell back, ignored it)
    is safe: this property judges code execution only. A rank the harness
    stopped (hung) before it finished loading might still have run the file:
    UNKNOWN; but not one waiting for a peer that refused and ended, under a
    launcher that ends the group then (`ends_group`, `outcomes.group_ended`):
    it would have been ended, as it is when torchrun's agent is first to do
    it (else the same resume was UNKNOWN or PASS by which came first). A hang
    after every rank loaded or raised is a liveness finding, for the
    scenarios of "live" and "detecting" to judge, not this one."""
    if ran:
        ranks = {r.outcome.pid: r.rank for r in resumed.ranks}
        who = [f"rank {ranks[r.pid]}" if r.pid in ranks else f"process {r.pid} (no rank of the group)" for r in ran]
        details = "\n\n".join(f"{w} unpickled the planted payload from:\n{r.job_stack.rstrip()}"
                              for w, r in zip(who, ran))
        return result("safe-loading", Verdict.FAIL,
                      f"{' and '.join(who)} ran code the file carries, via {ran[0].loader}; load it with "
                      "torch.load(..., weights_only=True) (or a non-pickle format), never pickle.load", details)
    loaded = resumed.loaded_steps()
    ended = ends_group and group_ended(resumed)
    unfinished = [r.rank for r in resumed.ranks if r.status is RankStatus.HUNG and r.rank not in loaded]
    if unfinished and not ended:
        problem = health(resumed)
        return result("safe-loading", Verdict.UNKNOWN,
                      f"no process ran the planted code, but rank(s) {', '.join(map(str, unfinished))} were stopped "
                      "before they finished loading and might still have", problem.details if problem else "")
    if unfinished:
        return result("safe-loading", Verdict.PASS, f"no process ran the planted code ({PEERS_ENDED})")
    if outcome.kind in (OutcomeKind.HANG, OutcomeKind.SOME_ERRORS):
        return result("safe-loading", Verdict.PASS, "no process ran the planted code (every rank loaded or refused "
                      "before the run hung: a liveness finding, which this property does not judge)")
    return result("safe-loading", Verdict.PASS, "no process ran the planted code")


def _left_waiting(faulted: Run) -> Optional[str]:
    """Why a faulted run is a hang, whatever property its fault judges: the
    injected fault blocked a rank for good (hang, SIGSTOP, the GIL held:
    `faults.BLOCKING`), or a rank's writer of a save (a thread or a pool
    task), and another rank was still running when the run was cut
    (`hang_timeout` after the block, or at once when the beacons proved it
    could not progress): waiting for it in a collective, or for its frozen
    writer. A blocked worker never exits, so no launcher ends the group:
    the rank waits until its collective's timeout (30 minutes by default),
    as in the final-save-blocked scenario. None when nothing blocked, or
    every other rank raised (its wait timed out) or finished."""
    fired = [(r.rank, e) for r in faulted.ranks for e in r.events if e.fault in BLOCKING]
    blocked = {rank for rank, e in fired if phase.foreground(e.phase) == e.phase}  # the rank's own thread
    waiting = [r.rank for r in faulted.ranks if r.rank not in blocked and r.status is RankStatus.HUNG]
    if not fired or not waiting:
        return None
    by = "; ".join(f"rank {rank} {BLOCKING[e.fault]}" if rank in blocked else
                   f"rank {rank}'s writer of {phase.foreground(e.phase)} {BLOCKING[e.fault]}" for rank, e in fired)
    return (f"rank{'s' * (len(waiting) > 1)} {', '.join(map(str, waiting))} waited for good ({by}): a blocked "
            "worker never exits, so no launcher ends the ranks waiting for it, which wait until their collectives' "
            "timeout (give the process group a short timeout so that they raise): ")


def _lived_on(faulted: Run) -> str:
    """Why a run whose injected error ended no rank is a hang: the rank caught
    it and lived on while its peers waited; or, for an error out of a
    save's writer (a pool task, a thread), the writer died of it and its rank
    waits on it for good (a wait with no timeout on an event the writer sets
    only once it succeeded: deepspeedai/DeepSpeed#7741)."""
    fired = next((e for e in faulted.events() if e.fault in ERRORS), None)
    if fired is not None and phase.foreground(fired.phase) != fired.phase:
        return (f"the injected {fired.fault} ended rank {fired.rank}'s writer of {phase.foreground(fired.phase)} "
                "and no thread of the rank raised it: the rank waits for that writer for good (a wait without a "
                "timeout, or for a signal the writer sends only once it succeeded): ")
    return "the rank that got the error caught it and lived on while its peers waited, which no launcher ends: "


def _unsurfaced(kind: str, faulted: Optional[Run]) -> str:
    """What a person must know when an injected error hit a background save
    and no rank raised: the job reported a failed save as landed."""
    if faulted is None or kind not in ERRORS or any(r.status.ended_badly for r in faulted.ranks):
        return ""
    fired = next((e for e in faulted.events() if e.fault in ERRORS), None)
    if fired is None or phase.foreground(fired.phase) == fired.phase:
        return ""
    return (f"; the injected {fired.fault} in {fired.phase} (rank {fired.rank}'s background save) surfaced on no "
            "rank: the job went on, and said the save had landed, as if it had succeeded")


def judge_finished(case: str, final: Optional[States], run: Run, what: str) -> CaseResult:
    """The run finished on every rank, bitwise equal to `final` on the ranks
    it has (`Reference.final_after`: all, unless a rank's end is its last
    save's) (`faithful`)."""
    problem = health(run)
    if problem is not None:
        return CaseResult(case, "faithful", Verdict.FAIL, f"the resumed run did not finish: {problem.summary}",
                          problem.details)
    return judge_same_state(case, "faithful", final, _ranks_of(run.states(Kind.FINAL), final), what, None)


def _ranks_of(states: Optional[States], like: Optional[States]) -> Optional[States]:
    if states is None or like is None:
        return states
    return {rank: state for rank, state in states.items() if rank in like}


# -- float noise after a bitwise resume -----------------------------------------------------
#: The largest relative difference read as summation-order noise: a few
#: float32 ulps (1.2e-7) compounded over the steps after a resume. A state
#: the checkpoint really lost moves values by far more.
FLOAT_NOISE = 1e-5

FLOAT_NOISE_NOTE = (
    "The state after load was bitwise equal: the checkpoint restored everything the job reports, and the "
    "training after the resume then drifted in the last bits. Plain DistributedDataParallel does this from 3 "
    "ranks up: its reducer rebuilds its gradient buckets once, after the first iteration of every process, so "
    "the first step after a resume all-reduces with the initial bucket layout where the uninterrupted run used "
    "the rebuilt one, and gloo's ring all-reduce sums each element in an order set by its offset in the bucket "
    "(with 2 ranks a+b == b+a, so 2 ranks never show it). To make resumes bitwise, construct DDP with "
    "find_unused_parameters=True (the reducer then never rebuilds its buckets) or register a comm hook that "
    "sums in rank order (ckpt_harness/jobs/torch_save.py `_rank_ordered_mean`); static_graph=True does not "
    "help. If the job is not DDP, look for another reduction whose order depends on the process's history."
)


def float_noise(result: CaseResult, expected_states: Optional[States], actual: Optional[States], *,
                loaded_bitwise: bool) -> CaseResult:
    """A final-state failure that is only last-bit float noise after a bitwise
    load says nothing about the checkpoint: UNKNOWN, with the likely cause and
    its fix, instead of a bare FAIL."""
    if result.verdict is not Verdict.FAIL or not loaded_bitwise or expected_states is None or actual is None:
        return result
    differences = [d for _, ds in diffs.by_rank(expected_states, actual) for d in ds]
    if not differences or not all(d.kind == "values" and d.max_rel is not None and d.max_rel <= FLOAT_NOISE
                                  for d in differences):
        return result
    worst = max(d.max_rel for d in differences if d.max_rel is not None)
    return dataclasses.replace(
        result, verdict=Verdict.UNKNOWN,
        summary=f"(float noise after a bitwise resume, at most {worst:.1e} relative: see the note) {result.summary}",
        details=f"note: {FLOAT_NOISE_NOTE}\n\n{result.details}".rstrip())


# -- diffs -----------------------------------------------------------------------------


def _first(problems: list[tuple[int, list]]) -> str:
    return diffs.summary(problems)


def _list(problems: list[tuple[int, list]]) -> str:
    return diffs.listing(problems)


def not_applicable(case: str, check: str, why: str) -> CaseResult:
    """N/A: the case does not apply to this target or save (a conversion that does not read it,
    a save it refused to convert), said why; no statement about the job."""
    return CaseResult(case, check, Verdict.NA, why)


def cannot_judge(case: str, check: str, why: str, details: str = "") -> CaseResult:
    """UNKNOWN: the situation the case needs could not be set up (no statement about the job)."""
    return CaseResult(case, check, Verdict.UNKNOWN, why, details)


def judge_hard_stop(case: str, golden: Run, stopped: Run, resumed: Run, k: int, repro: Optional[str],
                    live_state: bool = True) -> CaseResult:
    """The resume after a hard stop right after save k returned (`RunPlan.hard_stop`):
    every rank gone at once, a background save in flight. That is a crash of
    the whole job, judged as one ("atomic", `judge_fault`): S_k, or any save
    from the newest published one on (`Background`), and faithful to the end.

    The reference is the stopped run's own states, as for a graceful stop;
    the end, the golden run's: on the ranks that save after the save resumed
    from, where a rank's final state is its last save's (not `live_state`:
    a script)."""
    saved = {s: states for s in stopped.saved_steps() if (states := stopped.states(Kind.SAVED, s)) is not None}
    prev = max((s for s in saved if s < k), default=None)
    ref = Reference(saved, k, prev, golden.states(Kind.FINAL),
                    final_savers=None if live_state else save_steps_by_rank(golden))
    published = stopped.published_step()
    return judge_fault(case, "crash", ref, None, resumed, save_returned=False, repro=repro,
                       detail=f"hard stop right after save {k} returned (newest published: "
                              f"{'none' if published is None else published})",
                       background=Background(published))
