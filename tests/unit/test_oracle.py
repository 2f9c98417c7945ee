"""The oracle over hand-built runs: every judge must be seen passing and failing."""

from __future__ import annotations

import pytest

from ckpt_harness.errors import ModelError
from ckpt_harness.oracle import (
    judge_flake,
    Outcome, accepted, classify_resume, expected, health, judge_blocked, judge_frozen_writer, judge_deterministic,
    judge_fault,
    judge_fresh_start, judge_late, judge_live, judge_load_step, judge_overlap, judge_overwriting_save, judge_replaced,
    judge_converted_resume, judge_reshard, judge_reshard_save, judge_same_state, judge_unreported_load, property_for,
    undecided_if,
)
from ckpt_harness.oracle import OutcomeKind as O
from ckpt_harness.state import capture
from ckpt_harness.verdict import CaseResult
from ckpt_harness.verdict import Verdict as V
from tests.unit.synthetic import K, OLDER, PREV, both, faulted, final, rank, reference, resumed, run, saved, state

P = pytest.param
PICKLE = "invalid load key, '\\x00'."


def expect(result, check, verdict, words=""):
    assert (result.check, result.verdict) == (check, verdict), result.summary
    assert words in result.summary
    assert (result.repro is None) == (verdict is V.PASS)


# -- what a resume loaded ---------------------------------------------------------------------
@pytest.mark.parametrize("resume, kind, step, words", [
    P(resumed(K), O.S_K, K, "", id="S_k"),
    P(resumed(PREV), O.S_PREV, PREV, "", id="S_prev"),
    P(resumed(2), O.OLDER, 2, "", id="older"),
    P(resumed(None), O.FRESH, None, "returned None", id="fresh-start"),
    P(run(rank(0).loaded(K), rank(1).loaded(PREV)), O.MIXED, None, "different steps", id="ranks-disagree"),
    P(run(rank(0).loaded(K, state(K, 0, w=PREV / 8)), rank(1).loaded(K)), O.MIXED, K,
      "rank 0 w come from step(s) [4]", id="key-of-prev-save"),
    P(run(rank(0).loaded(K, state(K, 0, w=9.0)), rank(1).loaded(K)), O.PARTIAL, K, "rank 0 w not restored",
      id="value-of-no-save"),
    P(run(rank(0).loaded(K, state(K, 0, w=None)), rank(1).loaded(K)), O.PARTIAL, K, "not restored", id="key-missing"),
    P(run(rank(0).loaded(K, state(K, 0, w=None)), rank(1).loaded(K)), O.PARTIAL, K, "rank 0 w",
      id="key-missing-named"),
    P(both(lambda b: b.loaded(K, state(9, 7))), O.GARBAGE, K, "matches no saved state", id="garbage"),
    P(both(lambda b: b.failed(message=f"cannot read /ckpt/step{K}/model.pt")), O.REFUSED, None, "/ckpt/step6",
      id="refused-naming-file"),
    P(both(lambda b: b.failed(message=f"shard of rank {b.r} missing")), O.REFUSED, None, "rank 0",
      id="refused-naming-rank"),
    P(both(lambda b: b.failed(message="bad magic number")), O.REFUSED_UNNAMED, None, "bad magic", id="refused-unnamed"),
    P(both(lambda b: b.failed(message=PICKLE, type="_pickle.UnpicklingError")), O.REFUSED_UNNAMED, None,
      "invalid load key", id="refused-unnamed-sentence"),
    P(both(lambda b: b.failed(message="checksum mismatch in model.pt")), O.REFUSED, None, "model.pt",
      id="refused-naming-file-without-directory"),
    P(both(lambda b: b.failed(message="missing .metadata")), O.REFUSED, None, ".metadata", id="refused-naming-dotfile"),
    P(both(lambda b: b.crashed()), O.REFUSED_UNNAMED, None, "died", id="every-rank-died"),
    P(run(rank(0).collective("barrier", 3).hung(), rank(1).hung(), timed_out=True), O.HANG, None,
      "waiting in barrier #3", id="hang"),
    P(run(rank(0).failed(), rank(1).loaded(K)), O.SOME_ERRORS, None, "rank 0 raised RuntimeError", id="one-raised"),
    P(both(lambda b: b), O.NO_LOAD, None, "no load was reported", id="no-load"),
    P(both(lambda b: b.saved(2).final()), O.FRESH, None, "first save was step 2: it never resumed",
      id="unreported-fresh-start"),
    P(both(lambda b: b.event("phase", f"train_step {PREV + 1}").final()), O.S_PREV, PREV,
      f"first train step was step {PREV + 1}", id="unreported-resume-of-prev"),
    P(both(lambda b: b.final()), O.S_K, K, "finished without saving", id="unreported-resume-of-last-save"),
])
def test_classify_resume(resume, kind, step, words):
    outcome = classify_resume(resume, saved(), K, PREV)
    assert (outcome.kind, outcome.step) == (kind, step), str(outcome)
    assert words in outcome.detail


def test_the_cause_leads_a_failure_and_the_peers_consequences_follow():
    """Rank 1's error came first; rank 0's "Connection closed by peer" is what
    rank 1's exit did to it: the headline starts with rank 1."""
    from ckpt_harness.oracle import health

    failed = run(rank(0).failed(phase=f"save {K}", message="Connection closed by peer", at=2.5),
                 rank(1).failed(phase=f"save {K}", message="Parent directory does not exist", at=2.0))
    summary = health(failed).summary
    assert summary.index("rank 1 raised") < summary.index("rank 0 raised"), summary
    waiting = run(rank(0).hung(), rank(1).failed(phase=f"save {K}", at=1.0), stuck=True)
    assert health(waiting).summary.startswith("failure, and peers stuck after it: rank 1 raised"), waiting


def test_a_rank_that_raised_while_its_peers_waited_refuses_the_whole_under_an_elastic_launcher():
    """torchrun's agent ends the group when rank 0 exits: its error is the job's
    refusal. A plain launcher leaves rank 1 waiting: an error on some ranks."""
    stuck = run(rank(0).failed(message="missing rank0.pt"), rank(1).hung(), timed_out=True, stuck=True)
    plain = classify_resume(stuck, saved(), K, PREV, ends_group=False)
    assert plain.kind is O.SOME_ERRORS and "peers stuck" in plain.detail
    elastic = classify_resume(stuck, saved(), K, PREV)
    assert elastic.kind is O.REFUSED and "would be ended by an elastic launcher" in elastic.detail, elastic
    hung = run(rank(0).collective("barrier", 3).hung(), rank(1).hung(), timed_out=True)
    assert classify_resume(hung, saved(), K, PREV).kind is O.HANG  # no rank ended: a hang under any launcher


@pytest.mark.parametrize("outcome, text", [(Outcome(O.S_K, 6), "S_k (step 6)"), (Outcome(O.FRESH), "fresh start"),
                                           (Outcome(O.REFUSED, 6, "IOError: x"), "refused: IOError: x")])
def test_outcome_text(outcome, text):
    assert str(outcome) == text


ACCEPTED = [
    ("atomic", O.S_PREV, False, True, True), ("atomic", O.S_PREV, True, True, False),
    ("atomic", O.S_K, True, True, True), ("atomic", O.FRESH, False, False, True),
    ("atomic", O.FRESH, False, True, False), ("atomic", O.REFUSED, False, True, False),
    ("durable", O.S_PREV, False, True, False), ("durable", O.S_K, True, True, True),
    ("skew-safe", O.OLDER, False, True, False), ("preserving", O.FRESH, False, False, True),
    ("preserving", O.S_PREV, False, True, True), ("preserving", O.GARBAGE, False, True, False),
    ("detecting", O.REFUSED, False, True, True), ("detecting", O.REFUSED, True, True, True),
    ("detecting", O.REFUSED_UNNAMED, False, True, False), ("detecting", O.PARTIAL, False, True, False),
    ("detecting", O.S_PREV, True, True, True),
]


@pytest.mark.parametrize("prop, kind, save_returned, has_prev, ok", ACCEPTED, ids=[
    f"{p}-{k.name}{'-returned' if r else ''}{'' if h else '-no-prev'}" for p, k, r, h, _ in ACCEPTED])
def test_accepted(prop, kind, save_returned, has_prev, ok):
    assert accepted(prop, Outcome(kind, 1), save_returned, has_prev) is ok


@pytest.mark.parametrize("prop", ["live", "faithful", "no-such-property"])
def test_accepted_refuses_a_property_without_resume_rule(prop):
    with pytest.raises(ModelError, match=prop):
        accepted(prop, Outcome(O.S_K, 1), False, True)


@pytest.mark.parametrize("prop, save_returned, has_prev, text", [
    ("durable", False, True, "S_k"),
    ("atomic", True, True, "S_k (the save had returned on every rank)"),
    ("atomic", False, True, "S_k or S_prev"),
    ("preserving", False, False, "S_k or a fresh start (no earlier checkpoint)"),
    ("detecting", True, True, "a refusal on every rank naming the file or rank, S_prev, or S_k intact"),
])
def test_expected(prop, save_returned, has_prev, text):
    assert expected(prop, save_returned, has_prev) == text


@pytest.mark.parametrize("kind, prop", [
    ("crash", "atomic"), ("crash-mid", "atomic"), ("hang", "atomic"), ("power-loss", "atomic"),
    ("error", "preserving"), ("eio", "preserving"), ("enospc", "preserving"), ("delay", "skew-safe"),
    ("power-loss-after", "durable"), ("torn", "detecting"), ("bit-flip", "detecting"), ("delete", "detecting"),
    ("unsafe-pickle", "safe-loading"),
])
def test_property_for(kind, prop):
    assert property_for(kind) == prop


# -- a resume after a fault --------------------------------------------------------------------
EIO_STUCK = run(rank(0).fault("eio").failed(f"save {K}", "EIO"), rank(1).collective("barrier", 4).hung(),
                timed_out=True, stuck=True, name="faulted")
EIO_RAISED = both(lambda b: b.fault("eio").failed(f"save {K}", "EIO"), name="faulted")
REFUSED = both(lambda b: b.failed(message=f"/ckpt/step{K}/model.pt: checksum mismatch"))
HANG = run(rank(0).collective("barrier", 2).hung(), rank(1).hung(), timed_out=True)


R, FIRST = reference(), reference(k=2, prev=None)
GARBAGE = both(lambda b: b.loaded(K, state(9, 7)))
ONE_RAISED = run(rank(0).failed(), rank(1).loaded(K))
DELAY_DIED = run(rank(0).fault("delay").crashed(), rank(1))
#: Rank 0 blocked for good by the injected hang (or SIGSTOP): its peer waits in the save's barrier to the cut,
#: or raises within its collective's timeout (the twin that passes).
BLOCKED_WAITED = run(rank(0).fault("hang").hung(), rank(1).collective("barrier", 4).hung(), timed_out=True,
                     name="faulted")
STOPPED_WAITED = run(rank(0).fault("sigstop").hung(stopped=True), rank(1).collective("barrier", 4).hung(),
                     timed_out=True, name="faulted")
BLOCKED_RAISED = run(rank(0).fault("hang").hung(), rank(1).failed(f"save {K}", "barrier timed out"), timed_out=True,
                     name="faulted")
WRITER_WAITED = run(rank(0).fault("hang", phase=f"bg_save {K}").hung(), rank(1).final(), timed_out=True,
                    name="faulted")


@pytest.mark.parametrize("kind, fault_run, resume, save_returned, ref, check, verdict, words", [
    P("crash", faulted(), resumed(K), False, R, "atomic", V.PASS, "S_k", id="crash-S_k"),
    P("crash", faulted(), resumed(PREV), False, R, "atomic", V.PASS, "S_prev", id="crash-S_prev"),
    P("crash", faulted(), resumed(None), False, FIRST, "atomic", V.PASS, "fresh", id="first-save-fresh-start"),
    P("crash", faulted(), resumed(K, w=0.3), False, R, "faithful", V.FAIL, "ranks 0-1 w: 0.3, expected 1.0",
      id="final-differs"),
    P("crash", faulted(), resumed(PREV), True, R, "atomic", V.FAIL, "expected S_k (the save had returned",
      id="S_prev-after-save-returned"),
    P("crash", faulted(), resumed(None), False, R, "atomic", V.FAIL, "expected S_k or S_prev", id="fresh-despite-prev"),
    P("crash", faulted(), resumed(2), False, R, "atomic", V.FAIL, "older", id="older"),
    P("crash", faulted(), REFUSED, False, R, "atomic", V.FAIL, "refused", id="refused-under-atomic"),
    P("bit-flip", None, REFUSED, True, R, "detecting", V.PASS, "refused", id="corrupt-refused"),
    P("bit-flip", None, GARBAGE, True, R, "detecting", V.FAIL, "garbage", id="corrupt-loaded-silently"),
    P("crash", faulted(fired=False), resumed(K), False, R, "atomic", V.UNKNOWN, "never fired", id="never-fired"),
    P("eio", EIO_STUCK, resumed(PREV), False, R, "preserving", V.PASS, "S_prev", id="eio-peer-stuck-ended"),
    P("eio", EIO_RAISED, resumed(PREV), False, R, "preserving", V.PASS, "S_prev", id="eio-every-rank-raised"),
    P("crash", faulted(), HANG, False, R, "live", V.FAIL, "waiting in barrier #2", id="resume-hangs"),
    P("crash", faulted(), ONE_RAISED, False, R, "live", V.FAIL, "raised RuntimeError in load", id="resume-one-raised"),
    P("delay", DELAY_DIED, resumed(K), False, R, "skew-safe", V.FAIL, "SIGKILL", id="delay-broke-run"),
    P("hang", BLOCKED_WAITED, resumed(PREV), False, R, "live", V.FAIL,
      "rank 1 waited for good (rank 0 blocked by the injected hang)", id="hang-peer-waits-for-good"),
    P("sigstop", STOPPED_WAITED, resumed(PREV), False, R, "live", V.FAIL,
      "rank 1 waited for good (rank 0 stopped by the injected SIGSTOP)", id="sigstop-peer-waits-for-good"),
    P("hang", BLOCKED_RAISED, resumed(PREV), False, R, "atomic", V.PASS, "S_prev", id="hang-peer-timed-out"),
    P("hang", WRITER_WAITED, resumed(PREV), False, R, "live", V.FAIL,
      "rank 0 waited for good (rank 0's writer of save 6 blocked by the injected hang)", id="hang-writer-waited"),
    P("power-loss-after", faulted(), resumed(PREV), True, R, "durable", V.FAIL, "expected S_k", id="durable-lost"),
    P("power-loss-after", faulted(), resumed(K), True, R, "durable", V.PASS, "S_k", id="durable-kept"),
])
def test_judge_fault(kind, fault_run, resume, save_returned, ref, check, verdict, words):
    result = judge_fault("case", kind, ref, fault_run, resume, save_returned=save_returned, detail="at #3",
                         repro="REPRO", row=lambda outcome: (outcome.kind.value,))
    expect(result, check, verdict, words)
    assert result.summary.startswith("at #3 → ")
    assert result.cells == (classify_resume(resume, ref.saved, ref.k, ref.prev).kind.value,)


def test_a_rank_left_waiting_for_a_blocked_one_is_a_live_failure_beside_the_faults_own_property():
    """The hang's own property (atomic) is judged as before and rides along: the live failure leads."""
    result = judge_fault("case", "hang", R, BLOCKED_WAITED, resumed(PREV), save_returned=False, detail="at #3",
                         repro="REPRO")
    assert [(j.check, j.verdict) for j in result.judgments()] == [("live", V.FAIL), ("atomic", V.PASS)]


def test_a_fault_that_never_fired_is_judged_by_what_the_run_did_instead():
    """transformers 4.25's end-of-training race: the delay aimed at rank 0's
    deletion never fired because rank 1 went first this time, and rank 1's
    deletion then failed by itself. The race happened: FAIL, not UNKNOWN. A
    run that merely took another path, or reached the harness's deadline
    first, stays UNKNOWN."""
    raced = run(rank(0).saved(OLDER).saved(PREV),
                rank(1).saved(OLDER).saved(PREV).failed(phase=f"after_save {K}", message="[Errno 2] No such file",
                                                       type="builtins.FileNotFoundError"), name="faulted")
    found = judge_fault("case", "delay", R, raced, resumed(K), save_returned=True, detail="at #0", repro="REPRO")
    assert (found.check, found.verdict) == ("skew-safe", V.FAIL), found.summary
    assert "the fault never fired: the run took another path" in found.summary and "FileNotFoundError" in found.summary
    quiet = judge_fault("case", "delay", R, faulted(fired=False), resumed(K), save_returned=True, detail="at #0",
                        repro="REPRO")
    assert quiet.verdict is V.UNKNOWN and "never fired" in quiet.summary
    elsewhere = run(rank(0).saved(OLDER).saved(PREV), rank(1).saved(OLDER).saved(PREV).failed(phase="train_step 5"),
                    name="faulted")  # outside the window the fault aimed at: not the race it looked for
    assert judge_fault("case", "delay", R, elsewhere, resumed(K), save_returned=True, detail="at #0",
                       repro="REPRO").verdict is V.UNKNOWN
    cut = run(rank(0).saved(OLDER).hung(), rank(1).saved(OLDER).hung(), timed_out=True, name="faulted")
    late = judge_fault("case", "delay", R, cut, resumed(K), save_returned=True, detail="at #0", repro="REPRO")
    assert late.verdict is V.UNKNOWN, late.summary


def test_a_delay_must_resume_as_the_run_without_it_did():
    """Not S_k: what the undelayed run's resume gave (a job may delete its newest
    checkpoint by design); only a difference is the delay's doing."""
    def judge(resume, undelayed):
        return judge_fault("case", "delay", R, faulted(), resume, save_returned=True, detail="at #3", repro="REPRO",
                           undelayed=undelayed)

    assert judge(resumed(PREV), Outcome(O.S_PREV, PREV)).verdict is V.PASS
    changed = judge(resumed(K), Outcome(O.S_PREV, PREV))
    assert (changed.check, changed.verdict) == ("skew-safe", V.FAIL)
    assert "expected what the run resumed without the delay: S_prev (step 4)" in changed.summary, changed.summary
    assert judge(resumed(PREV), None).verdict is V.FAIL  # no undelayed run to go by: S_k


def test_an_error_whose_peers_waited_is_live_only_where_nothing_ends_the_group():
    """The same case under both launchers: its own property judged either way,
    and `live` failing only where a plain launcher leaves the peers waiting."""
    def judge(ends_group):
        return judge_fault("case", "eio", R, EIO_STUCK, resumed(PREV), save_returned=False, detail="at #3",
                           repro="REPRO", ends_group=ends_group)

    plain, elastic = judge(False), judge(True)
    assert [(j.check, j.verdict) for j in plain.judgments()] == [("live", V.FAIL), ("preserving", V.PASS)]
    assert "did not reach every rank" in plain.summary and "launcher = plain" in plain.summary
    assert [(j.check, j.verdict) for j in elastic.judgments()] == [("preserving", V.PASS), ("live", V.PASS)]
    assert "would be ended by an elastic launcher" in elastic.also[0].summary


def test_an_error_no_rank_raised_is_a_hang_named_for_where_it_struck():
    """The rank that got the error caught it and lived on; or, where the error
    ended a save's writer (a pool task, a thread), the rank waits for that
    writer for good (deepspeedai/DeepSpeed#7741), which a report must say."""
    def judge(where):
        lived = run(rank(0).fault("error", phase=where).hung(), rank(1).hung(), timed_out=True, name="faulted")
        return judge_fault("case", "error", R, lived, resumed(PREV), save_returned=False, detail="at #3",
                           repro="REPRO")

    writer, caught = judge(f"bg_save {K}"), judge(f"save {K}")
    assert (writer.check, writer.verdict) == (caught.check, caught.verdict) == ("live", V.FAIL)
    assert f"the injected error ended rank 0's writer of save {K} and no thread of the rank raised it" \
        in writer.summary, writer.summary
    assert "the rank that got the error caught it and lived on" in caught.summary, caught.summary


# -- runs: live, loads, states -------------------------------------------------------------------
@pytest.mark.parametrize("r, words", [
    P(run(rank(0).collective("barrier", 3).hung(), rank(1).hung(None), timed_out=True),
      "hang: rank 0 waiting in barrier #3 called from train.py:40 in save() during save 6", id="hang"),
    P(run(rank(0).failed("load", "no such file"), rank(1)),
      "failure: rank 0 raised RuntimeError in load: no such file; rank 1 finished", id="raised"),
    P(run(rank(0).crashed(), rank(1).hung(), timed_out=True, stuck=True),
      "failure, and peers stuck after it: rank 0 died (signal SIGKILL)", id="died-peer-stuck"),
    P(run(rank(0).fault("hang").hung(), rank(1).hung(), timed_out=True),
      "blocked by the injected hang before operation #3 of save 6", id="injected-hang"),
    P(run(rank(0).fault("sigstop").hung(stopped=True), rank(1).hung(), timed_out=True),
      "hang: rank 0 stopped by the injected SIGSTOP before operation #3 of save 6; rank 1", id="injected-sigstop"),
    P(run(rank(0).fault("gil").hung(), rank(1).hung(), timed_out=True),
      "hang: rank 0 holding the GIL in a C loop (injected gil fault) before operation #3 of save 6", id="injected-gil"),
    P(run(rank(0).collective("barrier", 3).hung(stopped=True), rank(1).hung(), timed_out=True),
      "hang: rank 0 stopped (SIGSTOP or SIGTSTP), waiting in barrier #3", id="stopped-from-outside"),
])
def test_health_names_what_each_rank_did(r, words):
    assert words in health(r).summary


def test_health_details_keep_job_frames_and_logs():
    assert health(resumed()) is None
    problem = health(run(rank(0).hung(), rank(1).failed(), timed_out=True))
    assert "/job/train.py" in problem.details and "launch/rank.py" not in problem.details
    assert "builtins.RuntimeError: boom" in problem.details and "/nonexistent/rank1.log" in problem.details


def test_health_details_say_what_a_frozen_ranks_stack_cannot():
    """A stack alone would read as a rank busy in `before`: the details say it was frozen, and why its
    flight recorder is missing."""
    stopped = health(run(rank(0).fault("sigstop").hung(stopped=True), rank(1).hung(), timed_out=True))
    assert "rank 0 stack when the run was stopped (stopped by the injected SIGSTOP" in stopped.details
    assert "the process was stopped (SIGSTOP): none of its threads ran" in stopped.details
    gil = health(run(rank(0).fault("gil").hung(), rank(1).hung(), timed_out=True))
    assert "rank 0 stack when the run was stopped (holding the GIL" in gil.details
    assert "did not answer within 2s; it held the GIL (the injected gil fault)" in gil.details
    assert "the process was stopped" not in gil.details


@pytest.mark.parametrize("r, verdict, words", [
    P(resumed(), V.PASS, "all ranks finished", id="finished"),
    P(HANG, V.FAIL, "hang", id="hung"),
    P(run(rank(0), rank(1).crashed(6)), V.FAIL, "SIGABRT", id="died"),
])
def test_judge_live(r, verdict, words):
    expect(judge_live("case", r, "REPRO"), "live", verdict, words)


@pytest.mark.parametrize("r, verdict, words", [
    P(resumed(None), V.PASS, "returned None", id="none-everywhere"),
    P(run(rank(0).loaded(None), rank(1).loaded(4)), V.FAIL, "returned 4 on rank 1", id="a-rank-loads"),
    P(both(lambda b: b), V.FAIL, "never reported", id="no-load"),
    P(run(rank(0).loaded(None), rank(1).failed()), V.FAIL, "never reported", id="one-rank-silent"),
])
def test_judge_fresh_start(r, verdict, words):
    expect(judge_fresh_start("case", r, "REPRO"), "fresh start", verdict, words)


@pytest.mark.parametrize("r, verdict, words", [
    P(resumed(4), V.PASS, "returned 4 on every rank", id="right-step"),
    P(run(rank(0).loaded(4), rank(1).loaded(2)), V.FAIL, "returned 2 on rank 1; expected 4", id="wrong-step"),
    P(run(rank(0).loaded(None), rank(1).loaded(4)), V.FAIL, "None (a silent fresh start) on rank 0", id="fresh"),
    P(both(lambda b: b), V.FAIL, "never reported", id="no-load"),
    P(run(rank(0).loaded(4), rank(1).failed()), V.FAIL, "rank 1", id="one-rank-silent"),
])
def test_judge_load_step(r, verdict, words):
    expect(judge_load_step("case", r, 4, "REPRO"), "load step", verdict, words)


@pytest.mark.parametrize("r, step, verdict, words", [
    P(both(lambda b: b.event("phase", "train_step 1").final()), 4, V.FAIL, "never resumed", id="trained-step-1"),
    P(both(lambda b: b.saved(2).saved(4).final()), 4, V.FAIL, "first save was step 2, though the directory held",
      id="saved-again"),
    P(both(lambda b: b.event("phase", "train_step 3").final()), 4, V.FAIL, "resumed from step 2, expected 4",
      id="older-step"),
    P(both(lambda b: b.saved(6).final()), 4, V.PASS, "first save was step 6: it resumed from step 4",
      id="next-save"),
    P(both(lambda b: b.final()), 6, V.PASS, "finished without saving", id="no-save-after-the-last"),
    P(both(lambda b: b), 4, V.UNKNOWN, "call ctx.loaded(step)", id="no-evidence"),
])
def test_judge_unreported_load(r, step, verdict, words):
    expect(judge_unreported_load("case", r, step, (2, 4, 6), "REPRO"), "load step", verdict, words)


def test_a_save_of_step_0_before_training_is_a_save_a_resume_starts_from_not_scratch():
    """OLMo-core saves step 0 before it trains: a resume that loads it and
    next saves step 2 resumed from save 0 (the save before a torn save 2: S_prev),
    where one that saved step 0 again started over."""
    steps = (0, 2, 4)
    from_save_0 = both(lambda b: b.saved(2).saved(4).final())
    outcome = classify_resume(from_save_0, {s: {r: state(s, r) for r in range(2)} for s in steps}, 2, 0)
    assert (outcome.kind, outcome.step) == (O.S_PREV, 0), str(outcome)
    expect(judge_unreported_load("case", from_save_0, 2, steps, "REPRO"), "load step", V.FAIL,
           "it resumed from step 0, expected 2")
    over = both(lambda b: b.saved(0).saved(2).final())
    assert classify_resume(over, {s: {r: state(s, r) for r in range(2)} for s in steps}, 2, 0).kind is O.FRESH
    expect(judge_unreported_load("case", over, 2, steps, "REPRO"), "load step", V.FAIL, "never resumed")
    # without a save of step 0, a first save of step 2 is a fresh start, as before
    assert classify_resume(from_save_0, saved(), K, PREV).kind is O.FRESH


def test_an_unreported_load_of_a_failed_run_adds_nothing_to_its_failure():
    assert judge_unreported_load("case", both(lambda b: b.failed()), 4, (2, 4, 6), "REPRO") is None


FINAL = {r: final(r) for r in range(2)}


@pytest.mark.parametrize("actual, verdict, words", [
    P(FINAL, V.PASS, "bitwise equal on every rank (3 keys each)", id="equal"),
    P({0: final(0), 1: final(1, w=0.25)}, V.FAIL,
      "final state differs (model or optimizer values): rank 1 w: 0.25, expected 1.0", id="value"),
    P({0: final(0), 1: final(1, w=None)}, V.FAIL, "rank 1 w: missing", id="missing-key"),
    P({0: final(0), 1: final(1, lr=0.1)}, V.FAIL, "rank 1 lr: unexpected key", id="extra-key"),
    P({0: final(0)}, V.FAIL, "rank 1 rank, step (+1 more): missing", id="missing-rank"),
    P({0: final(0, w=0.5), 1: final(1, step=3)}, V.FAIL, "rank 0 w: 0.5, expected 1.0 (and 1 more keys: counters)",
      id="two"),
    P(None, V.FAIL, "no final state recorded on every rank", id="nothing"),
])
def test_judge_same_state(actual, verdict, words):
    expect(judge_same_state("case", "faithful", FINAL, actual, "final state", "REPRO"), "faithful", verdict, words)


def test_judge_deterministic():
    golden = both(lambda b: b.saved(4))
    assert judge_deterministic("c", golden, both(lambda b: b.saved(4)), 4) is None
    assert judge_deterministic("c", golden, both(lambda b: b.saved(2)), 4) is None
    result = judge_deterministic("c", golden, run(rank(0).saved(4, state(4, 0, w=0.7)), rank(1).saved(4)), 4)
    assert (result.check, result.verdict) == ("deterministic", V.UNKNOWN)
    assert "differ at save 4: rank 0 w: 0.7, expected 0.5" in result.summary


NONDET = CaseResult("c", "deterministic", V.UNKNOWN, "differ")


@pytest.mark.parametrize("nondeterminism, verdict, out", [
    P(None, V.FAIL, V.FAIL, id="deterministic-fail-stands"),
    P(NONDET, V.FAIL, V.UNKNOWN, id="nondeterministic-fail-undecided"),
    P(NONDET, V.PASS, V.PASS, id="nondeterministic-pass-stands"),
])
def test_undecided_if(nondeterminism, verdict, out):
    result = undecided_if(nondeterminism, CaseResult("c", "faithful", verdict, "s"))
    assert result.verdict is out
    assert result.summary.startswith("(job not deterministic)") is (out is not verdict)


# -- the catalogue's own situations ------------------------------------------------------------------
BEFORE = {"step4/model.pt": "d1", "step4/meta.json": "m1"}
NEW = {"step4/model.pt": "d2", "step4/meta.json": "m2"}
REFUSAL = both(lambda b: b.failed("save 4", "step4 exists"))
EARLIER = {r: state(4, r) for r in range(2)}


@pytest.mark.parametrize("r, dir_state, flag, after, committed, verdict, words", [
    P(REFUSAL, "complete", False, BEFORE, {}, V.PASS, "directory untouched: RuntimeError: step4 exists", id="refused"),
    P(REFUSAL, "complete", False, {**BEFORE, "step4/model.pt": "x"}, {}, V.FAIL,
      "refused, but only after changing step4/model.pt", id="refused-after-change"),
    P(REFUSAL, "complete", True, BEFORE, {}, V.FAIL, "overwrite=True ignored", id="flag-ignored"),
    P(REFUSAL, "partial", True, BEFORE, {}, V.PASS, "directory untouched", id="flag-partial-refused"),
    P(both(lambda b: b.saved(4)), "complete", True, {**NEW, "step4/old.pt": "o"}, NEW, V.FAIL,
      "stale files of the earlier run left in place: step4/old.pt", id="stale-file"),
    P(both(lambda b: b.saved(4)), "complete", True, {**NEW, "step4/meta.json": "m1"}, NEW, V.FAIL,
      "stale files of the earlier run left in place: step4/meta.json", id="kept-old-file"),
    P(both(lambda b: b.loaded(4)), "complete", False, BEFORE, {}, V.PASS, "resumed the complete checkpoint",
      id="resumed-complete"),
    P(both(lambda b: b.loaded(4, state(2, b.r))), "complete", False, BEFORE, {}, V.FAIL,
      "resumed the checkpoint it found, wrongly", id="resumed-complete-wrongly"),
    P(both(lambda b: b.loaded(4)), "partial", False, BEFORE, {}, V.FAIL, "resumed from the partial directory",
      id="resumed-partial"),
    P(run(rank(0).hung(), rank(1), timed_out=True), "complete", False, BEFORE, {}, V.FAIL, "hang", id="hang"),
])
def test_judge_overwriting_save(r, dir_state, flag, after, committed, verdict, words):
    result = judge_overwriting_save("c", "overwrite-safe", r, label="into step4", state=dir_state, flag=flag,
                                    earlier_saved=EARLIER, before=BEFORE, after=after, committed=committed,
                                    tops=["step4"], repro="REPRO")
    expect(result, "overwrite-safe", verdict, words)
    assert result.summary.startswith("into step4: ")


@pytest.mark.parametrize("after", [
    P(NEW, id="replaced"),
    P({**NEW, "step2/model.pt": "a"}, id="other-dir-ignored"),
])
def test_judge_overwriting_save_clean_replacement_leaves_the_resume_to_judge(after):
    assert judge_overwriting_save("c", "overwrite-safe", both(lambda b: b.saved(4)), label="l", state="complete",
                                  flag=True, earlier_saved=EARLIER, before=BEFORE, after=after, committed=NEW,
                                  tops=["step4"], repro="REPRO") is None


@pytest.mark.parametrize("resume, verdict, words", [
    P(resumed(4), V.PASS, "replaced with no stale file", id="S_k"),
    P(resumed(2), V.FAIL, "the resume gave older (step 2)", id="older"),
    P(HANG, V.FAIL, "the resume gave hang", id="hang"),
    P(resumed(4, w=0.1), V.FAIL, "replaced and resumed, then final state", id="final-differs"),
])
def test_judge_replaced(resume, verdict, words):
    expect(judge_replaced("c", "overwrite-safe", resume, reference(k=4), label="l", repro="REPRO"),
           "overwrite-safe", verdict, words)


@pytest.mark.parametrize("r, verdict, words", [
    P(run(rank(0).fault("delay").final(), rank(1).final()), V.PASS, "finished as without the delay", id="same"),
    P(run(rank(0).final(), rank(1).final()), V.UNKNOWN, "never fired", id="not-fired"),
    P(run(rank(0).fault("delay").final(final(0, w=0.2)), rank(1).final()), V.FAIL, "rank 0 w: 0.2", id="differs"),
    P(run(rank(0).fault("delay").hung(), rank(1).collective("barrier", 5).hung(), timed_out=True), V.FAIL,
      "waiting in barrier #5", id="hang"),
])
def test_judge_late(r, verdict, words):
    expect(judge_late("c", "skew-safe", r, FINAL, label="l", repro="REPRO"), "skew-safe", verdict, words)


@pytest.mark.parametrize("r, verdict, words", [
    P(run(rank(0).fault("hang").hung(), rank(1).failed("save 6", "peer gone"), rank(2).crashed(), timed_out=True),
      V.PASS, "every other rank raised within 5s: RuntimeError: peer gone", id="peers-raised"),
    P(run(rank(0).fault("hang").hung(), rank(1).failed(), rank(2).collective("barrier", 5).hung(), timed_out=True),
      V.FAIL, "rank 2 waiting in barrier #5", id="peer-hung"),
    P(run(rank(0).hung(), rank(1).failed(), rank(2).failed(), stuck=True), V.UNKNOWN,
      "never fired: the run took another path", id="not-fired"),
    P(run(rank(0).hung(), rank(1).hung(), rank(2).hung(), timed_out=True), V.UNKNOWN,
      "never fired: the run reached the harness's deadline", id="cut-before-the-fault"),
    P(run(rank(0).fault("hang").hung(None), rank(1).failed(), rank(2).failed(), timed_out=True), V.UNKNOWN,
      "no stack from rank(s) [0]", id="no-stack"),
])
def test_judge_blocked(r, verdict, words):
    expect(judge_blocked("c", "live", r, 0, 5.0, label="l", repro="REPRO"), "live", verdict, words)


FULL, OTHER = capture({"w": [1.0, 2.0], "step": 4}), capture({"w": [1.0, 2.5], "step": 4})
AT_2 = both(lambda b: b.saved_full(4, FULL), name="saved")


@pytest.mark.parametrize("resume, verdict, words", [
    P(both(lambda b: b.loaded(4).loaded_full(4, FULL).final(), 3), V.PASS, "save 4 at 2 ranks resumed at 3",
      id="equal"),
    P(run(*(rank(r).loaded(4).loaded_full(4, OTHER if r == 2 else FULL) for r in range(3))), V.FAIL,
      "rank 2 w.1: 2.5, expected 2.0", id="differs"),
    P(both(lambda b: b.loaded(2).loaded_full(4, FULL), 3), V.FAIL, "load() returned [2], expected 4", id="wrong-step"),
    P(both(lambda b: b.failed(message="shape mismatch"), 3), V.FAIL, "raised RuntimeError in load: shape mismatch",
      id="refused"),
    P(run(rank(0).loaded(4).loaded_full(4, FULL), rank(1).loaded(4).loaded_full(4, FULL).failed("train")), V.FAIL,
      "then failure", id="failed-after-load"),
])
def test_judge_reshard(resume, verdict, words):
    expect(judge_reshard("c", "reshardable", AT_2, resume, 4, 2, 3, "REPRO"), "reshardable", verdict, words)


@pytest.mark.parametrize("resume, verdict, words", [
    P(both(lambda b: b.loaded_full(None, FULL).saved(6).final(), 3), V.PASS, "save 4 at 2 ranks resumed at 3",
      id="equal"),
    P(both(lambda b: b.loaded_full(None, OTHER).saved(6).final(), 3), V.FAIL, "w.1: 2.5, expected 2.0",
      id="differs"),
    P(both(lambda b: b.loaded_full(None, OTHER).saved(2).saved(4).saved(6).final(), 3), V.FAIL,
      "it started from scratch, expected step 4 (its first save was step 2)", id="fresh-start"),
    P(both(lambda b: b.saved(6).final(), 3), V.UNKNOWN, "the run made none", id="no-forward"),
    P(both(lambda b: b._record("loaded full", step=None, state=None, failed="KeyError: 'model'"), 3), V.ERROR,
      "rank 0: KeyError: 'model': fix the function given to ckpt_harness.full_state", id="observer-raised"),
    P(both(lambda b: b.failed("run", message="size mismatch"), 3), V.FAIL, "size mismatch", id="refused"),
])
def test_judge_reshard_of_a_resume_that_reports_no_load(resume, verdict, words):
    """A script says nothing of its load: where it started is read from its
    saves, its state after load is the one at its first module forward."""
    expect(judge_reshard("c", "reshardable", AT_2, resume, 4, 2, 3, "REPRO", reports=False, save_steps=[2, 4, 6]),
           "reshardable", verdict, words)


@pytest.mark.parametrize("resume, verdict, words", [
    P(both(lambda b: b.loaded(4).loaded_full(4, FULL).final()), V.PASS, "the job's own loader resumed it: bitwise",
      id="equal"),
    P(run(*(rank(r).loaded(4).loaded_full(4, OTHER if r == 1 else FULL) for r in range(2))), V.FAIL,
      "full state after loading the converted save 4 differs (model or optimizer values): rank 1 w.1: 2.5, "
      "expected 2.0", id="differs"),
    P(both(lambda b: b.failed(message="no .metadata")), V.FAIL,
      "the job's resume from the converted save 4: failure: rank 0 raised RuntimeError in load: no .metadata",
      id="refused"),
])
def test_judge_converted_resume(resume, verdict, words):
    expect(judge_converted_resume("c", "convertible", 4, FULL, resume, noun="job", repro="REPRO"), "convertible",
           verdict, words)


def test_judge_reshard_save():
    assert judge_reshard_save("c", "reshardable", AT_2, 4, 2, "REPRO") is None
    expect(judge_reshard_save("c", "reshardable", run(rank(0).crashed(), rank(1)), 4, 2, "REPRO"), "reshardable",
           V.FAIL, "the run at world size 2 failed")
    expect(judge_reshard_save("c", "reshardable", AT_2, 6, 2, "REPRO"), "reshardable",
           V.UNKNOWN, "save 6 never returned on every rank")
    # A save rank 0 alone makes (a DDP script's torch.save): its full state is that rank's.
    rank0 = run(rank(0).saved_full(4, FULL), rank(1))
    assert judge_reshard_save("c", "reshardable", rank0, 4, 2, "REPRO", savers=frozenset({0})) is None
    expect(judge_reshard_save("c", "reshardable", rank0, 4, 2, "REPRO"), "reshardable", V.UNKNOWN, "never returned")
    raised = both(lambda b: b._record("saved full", step=4, state=None, failed="RuntimeError: no group"))
    expect(judge_reshard_save("c", "reshardable", raised, 4, 2, "REPRO"), "reshardable", V.ERROR,
           "could not be recorded at save 4, rank 0: RuntimeError: no group")


# -- saves that land in the background (issue 11) ------------------------------------------
@pytest.mark.parametrize("outcome, step, published, ok", [
    P(O.S_K, 4, 2, True, id="S_k before publication"),
    P(O.S_PREV, 2, 2, True, id="the published save"),
    P(O.OLDER, 0, 2, False, id="older than the published save"),
    P(O.FRESH, None, None, True, id="fresh start, nothing published"),
    P(O.FRESH, None, 2, False, id="fresh start after save 2 was published"),
    P(O.OLDER, 2, None, True, id="an unpublished older save, nothing published"),
    P(O.S_PREV, 2, 4, False, id="save k published: only S_k"),
    P(O.S_K, 4, 4, True, id="S_k once published"),
    P(O.REFUSED, None, None, False, id="a refusal is never a resume"),
    P(O.MIXED, 2, None, False, id="mixed"),
])
def test_accepted_background(outcome, step, published, ok):
    from ckpt_harness.oracle.properties import Background, accepted_background

    assert accepted_background(Outcome(outcome, step), Background(published), 4) is ok


def test_expected_background_says_which_save_was_published():
    from ckpt_harness.oracle.properties import Background, expected_background

    assert expected_background(Background(4), 4).startswith("S_k (save k had been published")
    assert "from step 2 on" in expected_background(Background(2), 4)
    assert "fresh start" in expected_background(Background(None), 4)


@pytest.mark.parametrize("created, own", [
    # flat: each save's directory, a pointer every save rewrites belongs to none
    ({2: {"step-2", "step-2/a.pt", "latest"}, 4: {"step-4", "step-4/a.pt", "latest"}},
     {2: {"step-2"}, 4: {"step-4"}}),
    # accelerate: one `checkpoints/` made by the first save, filled by every save
    ({1: {"checkpoints", "checkpoints/checkpoint_0", "checkpoints/checkpoint_0/m.bin"},
      2: {"checkpoints/checkpoint_1", "checkpoints/checkpoint_1/m.bin"}},
     {1: {"checkpoints/checkpoint_0"}, 2: {"checkpoints/checkpoint_1"}}),
    # a staging directory every save reuses, renamed into place
    ({2: {".tmp", ".tmp/a.pt", "step-2"}, 4: {".tmp", ".tmp/a.pt", "step-4"}}, {2: {"step-2"}, 4: {"step-4"}}),
    # one file every save rewrites: nothing to count
    ({2: {"model.pt"}, 4: {"model.pt"}}, {2: set(), 4: set()}),
])
def test_a_saves_own_checkpoint_is_found_at_any_depth(created, own):
    from ckpt_harness.oracle.retention import own_roots

    assert own_roots(created) == own


def _renamed_twice(routine: str, trains: str):
    """Two ranks rename one staging directory (the LLaMA-Factory race); rank 1,
    which saved nothing and so had no save open, raises in the second rename."""
    tb = ('Traceback (most recent call last):\n  File "/job/train.py", line 103, in <module>\n    save(step)\n'
          '  File "/job/train.py", line 84, in save\n    os.rename(staging, final)\nFileNotFoundError: gone\n')
    r0 = (rank(0).event("trains", "run", functions=[trains]).event("saves", "run", functions=[routine])
          .event("rename", "save 2", point=3, src="tmp-2", dst="checkpoint-2", routine=routine).final())
    r1 = rank(1).event("trains", "run", functions=[trains]).failed("run", "gone", "builtins.FileNotFoundError", tb)
    return run(r0, r1, name="golden")


def test_a_rank_in_a_save_routine_is_in_the_checkpointing_whatever_its_phase():
    """The function the job's checkpoint I/O happened in (on any rank) is a save
    routine: a rank that raised inside it, with no save of its own open, is in
    the checkpointing, and the report says where. A function that also trains
    (the loop, `main`) is no save routine: the same failure there is the job's."""
    from ckpt_harness.oracle.judges import judge_golden

    problem = health(_renamed_twice("/job/train.py:save", "/job/train.py:<module>"))
    assert problem.checkpointing, problem.summary
    assert "rank 1 raised FileNotFoundError in run, in the save routine save(): gone" in problem.summary
    assert judge_golden("golden", _renamed_twice("/job/train.py:save", "/job/train.py:<module>"), None).verdict \
        is V.FAIL
    trains_too = _renamed_twice("/job/train.py:save", "/job/train.py:save")
    assert not health(trains_too).checkpointing and "save routine" not in health(trains_too).summary
    assert judge_golden("golden", trains_too, None).verdict is V.ERROR


def test_a_scripts_final_state_is_judged_on_the_ranks_that_save_after_the_resume():
    """A script's final state is its last save's: resumed after rank 1's last
    save, rank 1 saves nothing again, and its end cannot be the golden one's."""
    from ckpt_harness.oracle.judges import Reference

    saved = {2: {0: {"a": 1}, 1: {"b": 1}}, 4: {0: {"a": 2}}}
    final = {0: {"last save": 4}, 1: {"last save": 2}}
    script = Reference(saved, 4, 2, final, final_savers={0: (2, 4), 1: (2,)})
    assert script.final_after(2) == {0: {"last save": 4}}
    assert script.final_after(4) == {}
    job = Reference(saved, 4, 2, final)
    assert job.final_after(2) == job.final_after(4) == final


def _rotated(listings: dict[int, list[int]]):
    """Two ranks; save s creates checkpoint-s on rank 0, and the directory
    right after it holds the checkpoints `listings[s]` names."""
    def of(r: int):
        b = rank(r)
        for s, kept in listings.items():
            if r == 0:
                b.event("mkdir", f"save {s}", path=f"checkpoint-{s}")
            b._record("saved", step=s, state=state(s, r), entries=[f"checkpoint-{k}" for k in kept])
        return b.final()
    return run(of(0), of(1), name="golden")


#: keep-last 3 over 6 saves whose rotation also keeps checkpoint 2 as the best
#: from save 5 on (the Trainer's load_best_model_at_end): 3, 4 went, 2 stayed.
WITH_BEST = {1: [1], 2: [1, 2], 3: [1, 2, 3], 4: [2, 3, 4], 5: [2, 4, 5], 6: [2, 5, 6]}


def test_a_rotation_that_keeps_its_best_checkpoint_passes_only_when_told():
    from ckpt_harness.oracle import judge_retention

    told = judge_retention("retention", _rotated(WITH_BEST), 3, "repro", keeps_best=True)
    expect(told, "retention", V.PASS, "an older one kept as the best (step 2, after 2 saves)")
    untold = judge_retention("retention", _rotated(WITH_BEST), 3, "repro")
    expect(untold, "retention", V.FAIL, "after save 5: the checkpoints of steps 2, 4, 5 remain; expected the "
                                       "checkpoints of steps 3, 4, 5 (each time the newest but one")
    assert "--keeps-best" in untold.summary, untold.summary


@pytest.mark.parametrize("listings, words", [
    ({**WITH_BEST, 6: [2, 4, 6]}, "after save 6: the checkpoints of steps 2, 4, 6 remain"),  # dropped save 5
    ({**WITH_BEST, 6: [2, 4, 5, 6]}, "after save 6: the checkpoints of steps 2, 4, 5, 6 remain"),  # one too many
    ({**WITH_BEST, 6: [1, 2, 6]}, "after save 6: the checkpoints of steps 1, 2, 6 remain"),  # two old ones
], ids=["drops-a-newest", "one-too-many", "two-old-ones"])
def test_a_kept_best_excuses_no_other_wrong_listing(listings, words):
    from ckpt_harness.oracle import judge_retention

    judged = judge_retention("retention", _rotated(listings), 3, "repro", keeps_best=True)
    expect(judged, "retention", V.FAIL, words)
    assert "or the newest 2 and one older kept as the best" in judged.summary and "--keeps-best" not in judged.summary


def test_keep_last_one_with_a_best_keeps_the_newest_and_the_best():
    from ckpt_harness.oracle import judge_retention

    listings = {1: [1], 2: [1, 2], 3: [1, 3], 4: [1, 4]}  # checkpoint 1 the best throughout
    expect(judge_retention("retention", _rotated(listings), 1, "repro", keeps_best=True), "retention", V.PASS,
           "step 1, after 3 saves")
    expect(judge_retention("retention", _rotated(listings), 1, "repro"), "retention", V.FAIL, "after save 2")


def test_a_background_save_that_never_landed_before_the_run_ended_is_flagged():
    """Save 4 returned a future and the run ended with it in flight on rank 1
    (it tore down without awaiting it); every one landed passes; a run with
    no background save has nothing to judge."""
    from ckpt_harness import oracle

    def made(r, landed=(2, 4)):
        r = r._record("saved", step=2, state={}, background=True)._record("saved", step=4, state={}, background=True)
        for step in landed:
            r = r._record("landed", step=step)
        return r

    lost = oracle.judge_landed("golden", run(made(rank(0)), made(rank(1), landed=(2,))), "repro")
    assert lost.verdict is V.FAIL and lost.check == "saves landed", lost
    assert lost.summary.startswith("save 4 on rank 1 returned in the background and never finished writing"), lost
    assert oracle.judge_landed("golden", both(made), None).verdict is V.PASS
    assert oracle.judge_landed("golden", both(lambda r: r.saved(2)), None) is None


def test_a_hard_stop_after_a_scripts_last_save_compares_no_final_state_it_never_saves_again():
    """A script's final state is its last save's: resumed from save 4, the
    last one, it finishes without saving, and no rank has a final state to
    compare (`live_state=False`). A Job's live final state is compared
    whatever it resumed from, and an empty one is a faithful FAIL."""
    from ckpt_harness import oracle

    golden = both(lambda r: r.saved(PREV).saved(K).final(state(K, r.r)))  # its end: its last save
    stopped = both(lambda r: r.saved(PREV).saved(K), name="stopped run")
    resumed_from_k = both(lambda r: r.final({}))  # found save K complete, nothing left to train or save
    script = oracle.judge_hard_stop("hard@4", golden, stopped, resumed_from_k, K, None, live_state=False)
    assert script.verdict is V.PASS, script
    job = oracle.judge_hard_stop("hard@4", golden, stopped, resumed_from_k, K, None, live_state=True)
    assert job.verdict is V.FAIL and "final state" in job.summary, job


# -- a save held until training went on (Stop.SLOW_WRITER) ---------------------------------------
def _stopped(*held):
    return run(*(rank(r).saved(K)._record("stopped", step=K, held=why) for r, why in enumerate(held)), name="stop")


@pytest.mark.parametrize("held, unknown, words", [
    P(("training", None), False, "", id="a-writer-started-after-a-step"),
    P(("limit", None), True, "rank 0's by limit", id="the-rank-waited-for-its-writer"),
    P(("stop", "stop"), True, "rank 0's by stop, rank 1's by stop", id="stopped-first"),
    P((None, None), True, "nothing was in flight", id="no-writer"),
])
def test_a_slow_writer_case_is_judged_only_when_training_overlapped_the_save(held, unknown, words):
    found = judge_overlap("slow@4", _stopped(*held), K)
    if not unknown:
        assert found is None
        return
    assert (found.check, found.verdict) == ("overlapped", V.UNKNOWN) and words in found.summary, found.summary


# -- a writer frozen for good, its rank going on (final-save-writer-frozen) ----------------------
@pytest.mark.parametrize("runs, verdict, words", [
    P(run(rank(0).fault("hang", phase=f"bg_save {K}").hung(), rank(1).final()), V.FAIL,
      "rank 0 waited for its frozen writer for good", id="the-trainer-waits-forever"),
    P(run(rank(0).fault("hang", phase=f"bg_save {K}").failed(phase=f"after_save {K}", message="timed out"),
          rank(1).final()), V.PASS, "every rank ended within 5s of the frozen writer: rank 0 raised",
      id="it-timed-out"),
    P(run(rank(0).fault("hang", phase=f"bg_save {K}").final(), rank(1).final()), V.PASS, "rank 0 finished",
      id="it-finished-without-it"),
    P(run(rank(0).hung(), rank(1).final()), V.UNKNOWN, "never fired", id="not-fired"),
])
def test_a_frozen_writer_is_a_hang_only_when_a_rank_waits_for_it_for_good(runs, verdict, words):
    found = judge_frozen_writer("hang@r0:bg_save4/write", "live", runs, 0, 5.0, label="rank 0's writer blocked",
                                repro="repro")
    assert found.verdict is verdict and words in found.summary, found.summary


def test_flake_folds_the_runs_that_did_not_pass_and_passes_when_none_failed():
    ok = CaseResult("golden", "live", V.PASS, "all ranks finished")
    lost = CaseResult("golden#3", "live", V.FAIL, "run 3 of 5: rename of latest.tmp failed on rank 1")
    slow = CaseResult("golden#4", "live", V.ERROR, "run 4 of 5: the job fails with no fault armed")
    assert judge_flake(5, [ok], "repro").verdict is V.PASS
    flagged = judge_flake(5, [ok, slow, lost], "repro")
    assert (flagged.verdict, flagged.repro) == (V.FAIL, "repro")
    assert flagged.summary.startswith("2 of 5 fault-free runs did not pass (golden#4, golden#3): run 4 of 5")
    assert judge_flake(5, [ok, slow], "repro").verdict is V.ERROR


@pytest.mark.parametrize("ends_group, verdict", [(True, V.PASS), (False, V.UNKNOWN)])
def test_a_peer_waiting_for_the_rank_that_refused_an_unsafe_file_is_ended_by_an_elastic_launcher(ends_group, verdict):
    """Rank 0 refuses the planted pickle and exits; rank 1, not done loading,
    waits for it in a collective. Under a launcher that ends the group then,
    rank 1 never goes on to load anything (PASS, as when torchrun's agent ends
    it first); under a plain launcher it might have (UNKNOWN). A rank hung
    with no peer ended stays UNKNOWN under either."""
    refused = run(rank(0).failed(message="refusing rng_0.pt: unsafe pickle"),
                  rank(1).collective("barrier", 5, phase="load").hung(), stuck=True)
    found = judge_fault("case", "unsafe-pickle", reference(), None, refused, save_returned=True, detail="x",
                        repro="REPRO", ends_group=ends_group)
    expect(found, "safe-loading", verdict, "no process ran the planted code")
    alone = run(rank(0).loaded(K), rank(1).collective("barrier", 5, phase="load").hung(), timed_out=True)
    stopped = judge_fault("case", "unsafe-pickle", reference(), None, alone, save_returned=True, detail="x",
                          repro="REPRO", ends_group=ends_group)
    expect(stopped, "safe-loading", V.UNKNOWN, "were stopped before they finished loading")


@pytest.mark.parametrize("verdict", [V.FAIL, V.UNKNOWN, V.ERROR])
def test_a_judgment_no_property_promises_is_information_never_a_failure(verdict):
    from ckpt_harness.oracle import informational

    judged = CaseResult("downgrade@2", "final state", verdict, "differs: model values", details="diff",
                        repro="ckpt-harness run --case downgrade@2")
    said = informational(judged, "a downgrade")
    assert said.verdict is V.PASS and said.details == "diff" and said.repro == judged.repro
    assert said.summary == f"for information, a downgrade: {verdict.value.upper()} differs: model values"
    passed = CaseResult("downgrade@2", "final state", V.PASS, "bitwise")
    assert informational(passed, "a downgrade") is passed
