"""Fault exploration against planted bugs (each flagged under its property) and
the reference checkpointer (which must pass everything: a false alarm is as
bad as a miss)."""

import collections
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ckpt_harness.pipeline.explore import baseline, explore
from ckpt_harness.verdict import Verdict
from tests.clirun import cli
from tests.test_reduction import judged_cells
from ckpt_harness.strategies import check, fault_plans, skews

ROOT = Path(__file__).resolve().parent.parent
REF = "tests.planted.checkpointers:ReferenceCheckpointer"


def tally(report):
    return collections.Counter((r.check, r.verdict, r.cells[-1] if r.cells else "") for r in report.results)


def test_reference_checkpointer_passes_every_single_fault(tmp_path):
    report = explore(REF, world_size=2, workdir=tmp_path)
    assert report.ok, report.explain()
    kinds = {r.cells[5] for r in report.results}
    assert {"crash", "crash-mid", "torn", "error", "eio", "enospc", "power-loss", "power-loss-after",
            "bit-flip", "zero-page", "truncate", "delete"} <= kinds
    outcomes = {r.cells[-1] for r in report.results}
    assert {"S_k", "S_prev"} <= outcomes  # both sides of the commit point were hit
    assert len(report.results) > 100


@pytest.mark.parametrize(
    "job, kw, prop, outcome",
    [
        # the pointer names a checkpoint whose shards are not there yet (crashes at the shards' fsyncs: some
        # before the pointer moved, S_prev and S_k both pass, the others after it, refused; 8 cases of 38)
        ("LatestBeforeShards", dict(faults=("crash",), corruptions=(), ops=("fsync",)), "atomic", "refused"),
        # shards of two saves in one directory (likewise at the fsyncs: mixed, and S_prev and S_k pass; 8 of 36)
        ("InPlaceOverwrite", dict(faults=("crash",), corruptions=(), ops=("fsync",)), "atomic", "mixed"),
        # a failed save took the previous checkpoint with it
        ("DeletesPreviousFirst", dict(faults=("eio",), corruptions=()), "preserving", "fresh start"),
        # a deleted file is loaded around, silently
        ("SkipsMissingFile", dict(faults=(), corruptions=("delete",)), "detecting", "partial"),
        # one rank refuses, its peers wait in a barrier forever, and nothing launches it that would end them
        ("LoadErrorBlocksPeers", dict(faults=(), corruptions=("delete",), launcher="plain"), "live",
         "error on some ranks"),
    ],
)
def test_planted_bugs_are_flagged_under_their_property(tmp_path, job, kw, prop, outcome):
    report = explore(f"tests.planted.checkpointers:{job}", world_size=2, workdir=tmp_path, **kw)
    assert (prop, Verdict.FAIL, outcome) in tally(report), report.table()
    failing = next(r for r in report.failures() if r.check == prop)
    assert failing.repro and f"--case {shlex.quote(failing.case)}" in failing.repro


def test_a_refusal_that_ends_one_rank_refuses_the_whole_under_an_elastic_launcher(tmp_path):
    """LoadErrorBlocksPeers under torchrun: the rank that found the damage exits,
    and the agent ends the peers waiting for it; the job refuses, naming the file."""
    report = explore("tests.planted.checkpointers:LoadErrorBlocksPeers", world_size=2, workdir=tmp_path, faults=(),
                     corruptions=("delete",))
    assert report.ok, report.explain()
    alone = [r for r in report.results if r.case.endswith(("rank0.pt", "rank1.pt"))]  # read by one rank only
    assert len(alone) == 2 and all(r.cells[-1] == "refused" for r in alone), report.table()
    assert all("would be ended by an elastic launcher" in r.summary for r in alone), report.explain()


@pytest.mark.parametrize("job, launcher, verdict, words", [
    ("torch_save", "elastic", Verdict.PASS, "would be ended by an elastic launcher"),
    ("torch_save", "plain", Verdict.FAIL, "the error did not reach every rank"),
    ("tests.planted.jobs:RetriesSaveAlone", "elastic", Verdict.FAIL, "caught it and lived on while its peers "
                                                                      "waited, which no launcher ends"),
])
def test_an_error_on_one_rank_is_a_hang_only_where_nothing_ends_the_group(tmp_path, pace, job, launcher, verdict,
                                                                          words):
    """torch_save's rank 0 raises out of its save while rank 1 waits in a barrier:
    torchrun's agent ends the group when rank 0 exits (live holds), a plain
    launcher leaves rank 1 waiting (live fails). A rank that catches its error
    and lives on is a hang under any launcher. The case's own property is
    judged either way: the previous checkpoint survived."""
    report = explore(job, world_size=2, workdir=tmp_path, faults=("error",), corruptions=(), ops=("mkdir",),
                     launcher=launcher, after=False, steps=6, timeout=pace(10.0))
    case = next(r for r in report.results if r.case == "error@r0:save4/mkdir(step_000004)")
    live = next(j for j in case.judgments() if j.check == "live")
    assert live.verdict is verdict and words in live.summary, report.explain()
    assert [(j.check, j.verdict) for j in case.judgments() if j.check == "preserving"] == [
        ("preserving", Verdict.PASS)], report.explain()


def test_rename_without_fsync_is_caught_by_power_loss_only(tmp_path):
    report = explore("tests.planted.checkpointers:RenameWithoutFsync", world_size=2, workdir=tmp_path,
                     faults=("crash", "power-loss"), corruptions=())
    by_kind = collections.defaultdict(set)
    for r in report.results:
        by_kind[r.cells[5]].add(r.verdict)
    assert by_kind["crash"] == {Verdict.PASS}
    assert Verdict.FAIL in by_kind["power-loss"]
    assert by_kind["power-loss-after"] == {Verdict.FAIL}  # a save it returned from is lost
    durable = next(r for r in report.results if r.check == "durable")
    assert "fresh start" in durable.summary


def test_rank0_only_barrier_hangs_the_golden_run(tmp_path, pace):
    report = explore("tests.planted.checkpointers:Rank0OnlyBarrier", world_size=2, workdir=tmp_path,
                     timeout=pace(3.0))
    (live,) = report.results
    assert live.check == "live" and live.verdict is Verdict.FAIL and "hang" in live.summary


def test_repro_line_replays_exactly_that_case(tmp_path):
    report = explore("tests.planted.checkpointers:DeletesPreviousFirst", world_size=2, workdir=tmp_path / "a",
                     faults=("eio",), corruptions=(), ops=("open",))
    failing = report.failures()[0]
    args = shlex.split(failing.repro)
    env = {**os.environ, args[0].partition("=")[0]: args[0].partition("=")[2]}
    out = subprocess.run([sys.executable, "-m", "ckpt_harness.cli", *args[2:], "--quiet"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "1 cases: 1 fail" in out.stdout
    assert failing.check in out.stdout and failing.cells[-1] in out.stdout


def test_trace_prints_the_phases_of_a_save_per_rank(tmp_path):
    out = cli("trace", "--job", "torch_save", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    rank0, rank1 = [line for line in out.stdout.splitlines() if line.startswith("rank ")]
    assert "write step_000004/model.pt (" in rank0 and "fsync step_000004/model.pt" in rank0
    assert "rename latest.tmp → latest" in rank0 and "barrier#" in rank0
    assert "write step_000004/rng_rank1.pt" in rank1 and "latest" not in rank1


def test_trace_of_the_last_save_shows_the_work_after_it(tmp_path):
    """explore breaks and delays `after_save N` too; trace shows what is there to
    break, the looks at the directory included: rank 1 checks what rank 0 deleted."""
    out = cli("trace", "--job", "tests.planted.jobs:EveryRankDeletesOldCheckpoints", "--save", "last", cwd=tmp_path,
              env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr
    after = out.stdout.split("after_save 4, the work after the last save")[1].splitlines()
    looks = "stat latest → stat step_000004 → stat . → list ."
    assert after[1] == f"rank 0: {looks} → stat step_000002 → rmtree step_000002", out.stdout
    assert after[2] == f"rank 1: {looks}", out.stdout


# -- beyond single faults ------------------------------------------------------------
@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return baseline(REF, world_size=2, workdir=tmp_path_factory.mktemp("reference"))


@settings(max_examples=6)
@given(data=st.data())
def test_reference_survives_two_faults_at_once(reference, data):
    check(reference, data.draw(fault_plans(reference, max_faults=2)))


def test_a_fault_whose_point_an_earlier_fault_led_past_never_fires(reference):
    """An error at the commit's rename sends rank 0 down its error path: its
    next operation is a collective, not the fsync the golden run did there.
    The second fault of the plan never fires; raised into the job, the
    mismatch read as a live FAIL of a correct checkpointer (a plan
    hypothesis found under load)."""
    from ckpt_harness.pipeline.cases import plan_of

    mine = [p for p in reference.points if (p.rank, p.phase) == (0, "save 4")]
    commit = next(i for i, p in enumerate(mine) if p.op == "rename")
    assert mine[commit + 1].op == "fsync"  # the golden run's operation right after the rename
    plan = f"error@r0:save4/{mine[commit].at}+error@r0:save4/{mine[commit + 1].at}"
    result = check(reference, plan_of(reference, plan).faults)
    assert result.verdict is Verdict.PASS


@settings(max_examples=4)
@given(data=st.data())
def test_reference_is_skew_safe_on_several_ranks_at_once(reference, data):
    result = check(reference, data.draw(skews(reference)))
    assert result.check == "skew-safe"


def test_hypothesis_shrinks_a_failing_plan_to_one_fault(tmp_path):
    """Every example is a real run (seconds each under load), and hypothesis
    stops shrinking after five minutes, so a random search that first hits a
    two-fault plan may run out of time before deleting a fault. Derandomized,
    the search is the same on every machine: the plain single faults come
    first, an eio fails within a few examples, and the shrink takes ~14 runs.
    No explain phase: it only spends more runs on a message we do not print.
    """
    from hypothesis import Phase, find

    base = baseline("tests.planted.checkpointers:DeletesPreviousFirst", world_size=2, workdir=tmp_path)

    def fails(plan):
        try:
            check(base, plan)
        except AssertionError:
            return True
        return False

    smallest = find(fault_plans(base, faults=("eio", "delay"), max_faults=2), fails,
                    settings=settings(max_examples=12, database=None, deadline=None, derandomize=True,
                                      phases=(Phase.generate, Phase.shrink)))
    assert len(smallest) == 1 and smallest[0].kind == "eio"


def test_an_owned_loop_job_that_names_no_phases_is_undecided_not_passed(tmp_path):
    report = explore("tests.planted.jobs:OwnLoop", world_size=2, workdir=tmp_path, faults=("crash",), corruptions=())
    (result,) = report.results
    assert result.verdict is Verdict.UNKNOWN and "ctx.phase" in result.summary
    assert not report.ok


def test_reference_rotation_survives_a_crash_at_every_point_of_it(tmp_path):
    report = explore(REF, world_size=2, keep_last=1, workdir=tmp_path, faults=("crash",), corruptions=())
    assert report.ok, report.explain()
    assert any(r.cells[2] == "rmtree" for r in report.results)  # the deletion of step 2 was a point


def test_a_resume_no_rank_reports_is_judged_from_what_it_did(tmp_path):
    """Crashes in save 4 of a job that resumes correctly but reports only fresh
    starts: its first train step (or that it had none left) says where it resumed."""
    report = explore("tests.planted.jobs:OwnLoopResumesSilently", world_size=2, workdir=tmp_path,
                     faults=("crash", "crash-after"),
                     corruptions=(), ops=("rename",))
    assert report.ok, report.explain()
    assert {"S_k", "S_prev"} <= {r.cells[-1] for r in report.results}, report.table()  # both sides of the commit
    assert [r.summary for r in report.results if "inferred, no load was reported" not in r.summary] == []


def test_a_job_that_ignores_its_checkpoint_after_a_crash_is_a_fresh_start(tmp_path):
    report = explore("tests.planted.jobs:OwnLoopIgnoresCheckpoints", world_size=2, workdir=tmp_path,
                     after=True, faults=(), corruptions=())
    (result,) = report.results
    assert result.verdict is Verdict.FAIL and "it never resumed" in result.summary, result.summary


@pytest.mark.parametrize("job, ok", [("EveryRankDeletesOldCheckpoints", False),
                                     ("MainRankDeletesOldCheckpoints", True)])
def test_work_after_the_last_save_is_delayed_and_crashed_too(tmp_path, job, ok):
    """The end-of-training deletion of old checkpoints comes after the last save:
    rank 0 late there exposes two ranks removing the same directory."""
    report = explore(f"tests.planted.jobs:{job}", world_size=2, workdir=tmp_path, faults=("crash", "delay"),
                     ops=("rmtree",), corruptions=())
    assert {r.case for r in report.results} == {"crash@r0:after_save4/rmtree(step_000002)",
                                                "delay@r0:after_save4/rmtree(step_000002)"}, report.explain()
    assert report.ok is ok, report.explain()
    if not ok:
        (failed,) = [r for r in report.results if r.verdict is Verdict.FAIL]
        assert failed.case.startswith("delay@r0:") and failed.check == "skew-safe", report.explain()
        assert "FileNotFoundError" in failed.summary


def test_a_delay_is_judged_against_the_same_run_without_it(tmp_path):
    """KeepsOnlyTheBestAtEnd deletes its newest checkpoint at the end by design,
    so a resume of what its run leaves starts from the best (step 2, S_prev),
    delayed or not: every delay case passes, the end-of-training ones judged
    against that, not against S_k. (Its racing twin is flagged above.)"""
    report = explore("tests.planted.jobs:KeepsOnlyTheBestAtEnd", world_size=2, workdir=tmp_path, faults=("delay",),
                     corruptions=(), save="last", ops=("rename", "rmtree"))
    assert report.ok, report.explain()
    at_end = [r for r in report.results if ":after_save4/" in r.case]
    assert at_end and all(r.cells[-1] == "S_prev" for r in at_end), report.table()
    assert any(r.cells[-1] == "S_k" for r in report.results if ":save4/" in r.case), report.table()


def test_power_loss_says_which_fsync_was_missing(tmp_path):
    report = explore("tests.planted.checkpointers:RenameWithoutFsync", world_size=2, workdir=tmp_path,
                     faults=("power-loss",), corruptions=(),
                     cases=["power-loss-after"])
    durable = next(r for r in report.results if r.check == "durable")
    assert durable.verdict is Verdict.FAIL
    assert "power loss lost" in durable.summary and "was never fsynced" in durable.summary, durable.summary
    assert "did not keep, and why:" in durable.details
    assert "renamed from tmp.step_" in durable.details, durable.details


def test_writes_the_probes_cannot_see_are_warned_about(tmp_path):
    report = explore("tests.planted.checkpointers:MmapWrites", world_size=2, workdir=tmp_path,
                     faults=("crash",), corruptions=(), cases=["golden"])
    assert len(report.warnings) == 2, report.table()
    assert report.warnings[0].startswith("exploration did not see writes to step_000002/raw.bin, step_000004/raw.bin:")
    assert report.warnings[1].startswith("no case state was derived from the golden run's trace")
    assert "mmap, sendfile, or native code" in report.table()
    reference = explore("tests.planted.checkpointers:ReferenceCheckpointer", world_size=2, workdir=tmp_path / "ref",
                        faults=("crash",), corruptions=(), cases=["golden"])
    assert reference.warnings == ()


@pytest.mark.parametrize("job", [pytest.param("torch_save", marks=pytest.mark.slow),  # the failing job proves it
                                 "tests.planted.checkpointers:LatestBeforeShards"])
def test_cases_that_leave_the_same_directory_share_one_resume_and_get_the_same_verdicts(tmp_path, job):
    """The reduction may only save time: with it and without, every case
    gets the same verdict and the same outcome, on a job that passes and on
    one whose `latest` goes up before its shards (atomic fails)."""
    settings = dict(world_size=2, faults=("crash", "crash-after"), corruptions=(), ops=("rename", "fsync", "mkdir"))
    shared = explore(job, workdir=tmp_path / "shared", **settings)
    alone = explore(job, workdir=tmp_path / "alone", share_resumes=False, **settings)
    verdicts = lambda report: [(r.case, r.check, r.verdict, r.cells) for r in report.results]  # noqa: E731
    assert verdicts(shared) == verdicts(alone)  # the cells hold the resume's outcome
    sharing = [r for r in shared.results if r.shares]
    names = {r.case for r in shared.results}
    assert sharing and all(r.shares in names and r.shares != r.case for r in sharing), shared.table()
    assert all(r.details.startswith(f"judged against the resume of case {r.shares}:") for r in sharing)
    assert not any(r.shares for r in alone.results)
    if job != "torch_save":
        assert any(r.verdict is Verdict.FAIL for r in sharing), shared.table()  # failures are shared too


@pytest.mark.parametrize("job, fails", [("tests.planted.checkpointers:CloseBeforePointerUnfenced", False),
                                       ("tests.planted.checkpointers:PointerBeforeCloseUnfenced", True)])
def test_crash_states_no_peer_notices_are_cut_from_the_golden_trace(tmp_path, job, fails):
    """A crash of rank 0 in a commit its peers do not wait for (they already
    returned from the save) leaves what the golden trace says: every
    operation that completed, the peers' whole save. Same verdicts and cells
    as the faulted runs, on a pointer committed after the files were closed
    (passes) and before (fails); the cases whose peer would wait in a barrier
    still run for real."""
    settings = dict(world_size=2, faults=("crash", "crash-after"), corruptions=(), ops=("rename", "collective"),
                    after=False, share_resumes=False)
    derived = explore(job, workdir=tmp_path / "derived", **settings)
    ran = explore(job, workdir=tmp_path / "ran", derive_states=False, **settings)
    cells = lambda report: [(r.case, r.check, r.verdict, r.cells) for r in report.results]  # noqa: E731
    assert cells(derived) == cells(ran), derived.table()
    cut = [r for r in derived.results if "derived from the golden run's trace" in r.details]
    assert cut and len(cut) < len(derived.results), derived.table()
    assert all("no peer waits on the crashed rank" in r.details for r in cut)
    failing = [r for r in cut if r.verdict is Verdict.FAIL]
    assert bool(failing) is fails, derived.table()
    assert all(r.verdict is Verdict.PASS for r in derived.results if r not in failing), derived.table()


@pytest.mark.parametrize("job", ["tests.planted.checkpointers:RenameWithoutFsync"])
def test_power_loss_states_cut_from_the_golden_trace_get_the_verdicts_of_faulted_runs(tmp_path, job):
    """Every rank stops at a power loss, so the golden run's trace (every
    byte logged) decides what the directory keeps: the same verdict and
    outcome per case as running each faulted save, on a job that renames
    without fsyncing (fails every case). A durable job (torch_save, passes
    every case) is compared alike in tests/test_reduction.py."""
    settings = dict(world_size=2, faults=("power-loss",), corruptions=())
    derived = explore(job, workdir=tmp_path / "derived", **settings)
    ran = explore(job, workdir=tmp_path / "ran", derive_states=False, **settings)
    cells = lambda report: [(r.case, r.check, r.verdict, judged_cells(r)) for r in report.results]  # noqa: E731
    assert cells(derived) == cells(ran) and len(derived.results) > 20
    assert all("the directory this case leaves is derived from the golden run" in r.details for r in derived.results)
    assert not any("derived" in r.details for r in ran.results)
    if job != "torch_save":
        assert all(r.verdict is Verdict.FAIL and "never fsynced" in r.summary for r in derived.results), \
            derived.table()


def test_states_are_derived_only_from_a_trace_that_rebuilds_the_golden_directory(tmp_path):
    """Bytes written past the probes (here through mmap) make the trace an
    incomplete account of the directory: the baseline says which file, and
    its power-loss cases run the faulted saves instead of cutting the trace.
    The reference job's trace rebuilds its directory byte for byte."""
    assert baseline("torch_save", workdir=tmp_path / "clean", world_size=2).replay_gap == ""
    blind = baseline("tests.planted.checkpointers:MmapWrites", workdir=tmp_path / "blind", world_size=2)
    assert "raw.bin" in blind.replay_gap
    report = explore("tests.planted.checkpointers:MmapWrites", workdir=tmp_path / "explore", world_size=2,
                     faults=("power-loss",), corruptions=(), ops=("rename",), after=False)
    assert report.results and not any("derived" in r.details for r in report.results), report.table()
    assert any("no case state was derived" in w and "raw.bin" in w for w in report.warnings), report.warnings
    # a run stopped after a background save waits for it to land: the golden trace does not show that
    assert "background" in baseline("dcp_async", workdir=tmp_path / "async", world_size=2).replay_gap


def test_a_power_loss_the_model_cannot_follow_is_unknown_not_an_error(tmp_path):
    """A file written by a child process and then fsynced by the rank (DCP's
    process-based async saves) is an fsync of a file the trace never saw:
    the model will not guess what a power loss leaves, and the case says so
    as UNKNOWN (no statement about the job), not as a harness ERROR."""
    report = explore("tests.planted.checkpointers:WritesInChildProcess", workdir=tmp_path, world_size=2,
                     faults=(), corruptions=(), after=True, cases=["power-loss-after"])
    (result,) = report.results
    assert result.verdict is Verdict.UNKNOWN, result.summary
    assert "the power-loss model cannot follow this run's trace" in result.summary and "side.bin" in result.summary
    assert any("side.bin" in w for w in report.warnings), report.warnings
