"""Fault-free verification: correct checkpointers pass, planted bugs are named."""

import re

import pytest

from ckpt_harness import Job, Verdict, verify
from ckpt_harness.errors import ConfigError, JobError


@pytest.mark.ckpt(world_size=[1, 2, 4], steps=6, save_every=2)
@pytest.mark.parametrize("job", ["torch_save", "dcp"])
def test_builtin_jobs_resume_bitwise(ckpt, job):
    report = ckpt.verify(job)
    report.assert_ok()
    checked = [(r.case, r.check) for r in report.results if r.check in ("state after load", "final state")]
    assert checked == [(f"resume@{k}", c) for k in (2, 4, 6) for c in ("state after load", "final state")]


@pytest.mark.ckpt(world_size=2, save_every=2)
@pytest.mark.parametrize("job, steps, cases", [("dcp_async", 6, None), ("dcp_async_process", 4, ["resume@4"])])
def test_async_jobs_resume_bitwise_once_their_background_saves_landed(ckpt, job, steps, cases):
    """The stopped run waits for save k's future (`Job.wait_for_saves`) before
    it parks; the process executor spawns a checkpoint process per rank and
    run (seconds each), so it resumes from its last save only: the stopped
    run's two saves go through one checkpoint process, the second to one
    already started."""
    report = ckpt.verify(job, steps=steps, cases=cases)
    report.assert_ok()
    loads = [r.summary for r in report.results if r.check == "load step"]
    resumed = [int(c.split("@")[1]) for c in cases] if cases else range(2, steps + 1, 2)
    assert loads == [f"load() returned {k} on every rank" for k in resumed]


def test_an_async_save_the_harness_cannot_wait_for_is_a_lost_checkpoint(ckpt):
    report = ckpt.verify("tests.planted.async_jobs:PublishesOnlyAtNextSave", world_size=2, steps=4)
    flagged = {r.case: r.summary for r in report.failures() if r.check == "load step"}
    assert flagged == {
        "resume@2": "load() returned None (a silent fresh start) on rank 0; "
                    "load() returned None (a silent fresh start) on rank 1; expected 2",
        "resume@4": "load() returned 2 on rank 0; load() returned 2 on rank 1; expected 4",
    }, report.explain()


@pytest.mark.parametrize(
    "job, check, words",
    [
        ("NoOptimizerState", "state after load", "optim/"),
        ("NoRngState", "state after load", "rng/"),
        ("NoSchedulerState", "state after load", "scheduler/"),
        ("WrongStep", "load step", "load() returned 1 on rank 0"),
    ],
)
def test_planted_resume_bugs_are_flagged_by_name(ckpt, job, check, words):
    report = ckpt.verify(f"tests.planted.jobs:{job}", steps=4)
    flagged = {r.check: r for r in report.failures() if r.case == "resume@2"}
    assert check in flagged, report.explain()
    assert words in flagged[check].summary
    assert flagged[check].repro.startswith("PYTHONPATH=") and "--case resume@2" in flagged[check].repro
    with pytest.raises(AssertionError, match=check):
        report.assert_ok()


def test_silent_partial_resume_also_breaks_the_final_state(ckpt):
    report = ckpt.verify("tests.planted.jobs:NoOptimizerState", steps=4)
    final = [r for r in report.results if r.check == "final state"]
    assert final and all(r.verdict is Verdict.FAIL for r in final)


def test_a_forgotten_optimizer_reads_as_one_line_not_one_per_key_per_rank(ckpt):
    report = ckpt.verify("tests.planted.jobs:NoOptimizerState", world_size=4, steps=4)
    text = report.explain()
    after_load = next(r for r in report.failures() if r.check == "state after load")
    assert after_load.details.splitlines()[:2] == ["ranks 0-3:", "  optim/* (18 keys): missing"], after_load.details
    assert "rank 1:" not in text
    assert len(text.splitlines()) < 50, text  # 249 lines before folding, 36 after


def test_plain_ddp_drift_after_a_bitwise_load_is_explained_not_failed(ckpt):
    report = ckpt.verify("tests.planted.jobs:PlainDDP", world_size=3, steps=4)
    final = {r.case: r for r in report.results if r.check == "final state"}
    assert final["resume@2"].verdict is Verdict.UNKNOWN, report.explain()
    assert "float noise after a bitwise resume" in final["resume@2"].summary
    assert "find_unused_parameters=True" in final["resume@2"].details
    assert Verdict.FAIL not in {r.verdict for r in report.results}, report.explain()


def test_plain_ddp_without_a_bucket_rebuild_resumes_bitwise(ckpt):
    ckpt.verify("tests.planted.jobs:PlainDDPNoRebuild", world_size=3, steps=4).assert_ok()


def test_rank0_only_barrier_in_final_save_is_reported_as_a_hang(ckpt, pace):
    timeout = pace(3.0)  # long enough to reach the final save
    report = ckpt.verify("tests.planted.jobs:Rank0BarrierInFinalSave", world_size=2, steps=4, timeout=timeout)
    (live,) = report.results
    assert live.verdict is Verdict.FAIL
    assert "hang" in live.summary
    assert "rank 0 waiting in barrier" in live.summary and "in save()" in live.summary
    assert "rank 1 finished" in live.summary
    assert "rank 0 stack" in live.details and "rank 1 stack" in live.details
    assert report.elapsed < timeout + pace(5.0)  # the deadline and a few seconds


def test_hang_in_ddps_cpp_all_reduce_names_both_collectives_and_where_the_ranks_part(ckpt, pace):
    report = ckpt.verify("tests.planted.jobs:Rank1BarrierAfterSaveWhileRank0Trains", world_size=2, steps=4,
                         timeout=pace(3.0))
    (live,) = report.results
    assert live.verdict is Verdict.FAIL and "hang" in live.summary, live.summary
    seq = re.search(r"rank 1 waiting in barrier #(\d+) called from jobs.py:\d+ in save\(\) during save 2",
                    live.summary)
    assert seq, live.summary
    assert (f"rank 0 waiting in all_reduce #{seq[1]} (DDP gradient bucket, from _common.py:" in live.summary
            and "in train_step()) during train_step 3" in live.summary), live.summary
    assert f"collectives part at #{seq[1]}: rank 0 all_reduce, rank 1 barrier" in live.summary
    assert "sigwait" not in live.details  # the recorder's own thread is not the job's


def test_a_run_without_a_hang_makes_no_collective_claims(tmp_path):
    report = verify("torch_save", world_size=2, steps=2, save_every=2, workdir=tmp_path)
    report.assert_ok()
    text = report.explain() + "".join(r.summary + r.details for r in report.results)
    assert "waiting in" not in text and "collectives part" not in text
    assert not list(tmp_path.rglob("rank*.collectives"))


def test_setup_failing_on_one_rank_names_the_rank_error_and_log(ckpt, pace):
    timeout = pace(30.0)
    report = ckpt.verify("tests.planted.jobs:SetupFailsOnRank1", world_size=2, steps=4, timeout=timeout)
    (live,) = report.results
    assert live.verdict is Verdict.ERROR  # the job cannot start: nothing about its checkpoints
    assert "rank 1 raised RuntimeError in setup: dataset shard 1 is missing" in live.summary
    assert "rank1.log" in live.details
    assert report.elapsed < pace(15.0)  # the stuck peer is cut after the failure grace, not at the deadline


def test_nondeterministic_job_is_unknown_not_blamed_on_the_checkpoint(ckpt):
    report = ckpt.verify("tests.planted.jobs:Unseeded", steps=2)
    verdicts = {r.check: r.verdict for r in report.results if r.case == "resume@2"}
    assert verdicts["deterministic"] is Verdict.UNKNOWN
    assert verdicts["final state"] is Verdict.UNKNOWN


class LocalJobHolder:
    pass


@pytest.mark.parametrize(
    "job, message",
    [
        ("no_such_job", "unknown job 'no_such_job': use one of torch_save, dcp, dcp_async, dcp_async_process, "
                        "dcp_s3connector, deepspeed_zero0, deepspeed, deepspeed_zero2, deepspeed_zero3, hf_trainer or "
                        "module:Class"),
        ("tests.no_such_module:Job", "cannot import 'tests.no_such_module'"),
        ("tests.planted.jobs:Missing", "has no attribute 'Missing'"),
        ("tests.planted.jobs:NotAJob", "is not a subclass of ckpt_harness.Job"),
        ("tests.planted.jobs:MissingMethods", "implement train_step(), save(), load()"),
        (42, "expected a Job subclass"),
    ],
)
def test_bad_jobs_get_an_error_that_says_what_to_do(job, message):
    with pytest.raises(JobError) as info:
        verify(job)
    assert message in str(info.value)


def test_a_job_class_defined_in_a_function_is_refused():
    class Local(Job):
        def run(self, ctx):
            pass

        def state(self, ctx):
            return {}

    with pytest.raises(JobError, match="define Job classes at module level"):
        verify(Local)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"world_size": 0}, "world_size must be between 1 and 8, got 0"),
        ({"world_size": 9}, "world_size must be between 1 and 8, got 9"),
        ({"steps": 4, "save_every": 5}, "save_every (5) must not exceed steps (4)"),
        ({"timeout": 0}, "timeout must be a positive number of seconds, got 0"),
        ({"steps": "8"}, "steps must be an integer, got '8'"),
        ({"total_steps": 8}, "unknown setting total_steps: RunConfig takes world_size, steps"),
    ],
)
def test_bad_settings_are_refused_before_launch(kwargs, message):
    with pytest.raises(ConfigError) as info:
        verify("torch_save", **kwargs)
    assert message in str(info.value)


def test_unknown_case_lists_the_valid_ones(tmp_path):
    with pytest.raises(ValueError, match="choose from golden, resume@2, resume@4"):
        verify("torch_save", steps=4, save_every=2, cases=["resume@3"], workdir=tmp_path)


def test_a_job_that_owns_its_loop_reports_through_ctx(ckpt):
    report = ckpt.verify("tests.planted.jobs:OwnLoop", steps=4)
    report.assert_ok()
    assert {r.case for r in report.results} == {"golden", "resume@2", "resume@4"}


def test_an_owned_loop_that_never_reports_its_load_is_flagged(ckpt):
    report = ckpt.verify("tests.planted.jobs:OwnLoopForgetsToReport", steps=4)
    fresh = next(r for r in report.results if r.check == "fresh start")
    assert fresh.verdict is Verdict.FAIL and "never reported its load" in fresh.summary


def test_simulated_multi_node_layout_runs_and_replays(ckpt):
    report = ckpt.verify("tests.planted.jobs:NoSchedulerState", world_size=4, nodes=2, steps=2)
    failing = report.failures()[0]
    assert "--nodes 2" in failing.repro
    with pytest.raises(ValueError, match="3 simulated nodes cannot share 2 ranks evenly"):
        ckpt.verify("torch_save", world_size=2, nodes=3)


def test_an_owned_loop_that_ignores_its_checkpoints_never_resumed(ckpt):
    """It retrains from step 1 to the same final state and never calls ctx.loaded:
    its repeated saves show that it started afresh on a directory holding a checkpoint."""
    report = ckpt.verify("tests.planted.jobs:OwnLoopIgnoresCheckpoints", steps=4)
    assert not report.ok
    for case in ("resume@2", "resume@4"):
        load = next(r for r in report.results if r.case == case and r.check == "load step")
        assert load.verdict is Verdict.FAIL and "the job never resumed" in load.summary, load.summary
        assert "its first save was step 2" in load.summary


def test_an_owned_loop_that_resumes_without_reporting_it_passes_on_evidence(ckpt):
    report = ckpt.verify("tests.planted.jobs:OwnLoopResumesSilently", steps=4)
    report.assert_ok()
    loads = {r.case: r for r in report.results if r.check == "load step"}
    assert set(loads) == {"resume@2", "resume@4"}
    assert "first train step was step 3" in loads["resume@2"].summary
    assert "finished without saving" in loads["resume@4"].summary


WRONG_SURVIVORS = ("after save 12: the checkpoints of steps 9, 10, 12 remain; expected the checkpoints of "
                   "steps 10, 11, 12")
KEPT_THREE = "after each of 12 saves exactly the newest 3 checkpoints remained"


@pytest.mark.parametrize("job, verdict, words", [
    ("LexicographicRotation", Verdict.FAIL, WRONG_SURVIVORS),
    ("NumericRotation", Verdict.PASS, KEPT_THREE),
    ("NestedLexicographicRotation", Verdict.FAIL, WRONG_SURVIVORS),
    ("NestedNumericRotation", Verdict.PASS, KEPT_THREE),
])
def test_keep_last_is_checked_after_every_fault_free_save(ckpt, job, verdict, words):
    """accelerate 0.16's lexicographic sort deletes checkpoint_10 (step 11) at the
    twelfth save; every resume still works, so only the retention check sees it.
    Nested is accelerate's own layout: every checkpoint in one `checkpoints/`
    directory that all saves share, which the check descends through."""
    report = ckpt.verify(f"tests.planted.jobs:{job}", steps=12, save_every=1, keep_last=3, cases=["resume@12"])
    retention = next(r for r in report.results if r.check == "retention")
    assert retention.verdict is verdict and words in retention.summary, retention.summary
    assert [r.verdict for r in report.results if r.check != "retention"] == [Verdict.PASS] * 6
