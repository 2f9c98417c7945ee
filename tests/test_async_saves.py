"""Async checkpointing (issue 11, part 2): faults inside the background save,
and what the oracle accepts for a save that returns before it lands.

Each planted bug of `tests/planted/async_jobs.py` is flagged under its
property, and the same case against the built-in `dcp_async` (the correct
variant) passes. Cases are aimed at single points of the background
writer's phase (`bg_save 4`) of a prepared baseline, not whole explorations:
world size 2, 4 steps, a couple of runs each.
"""

import dataclasses
import re

import pytest

from ckpt_harness import targets
from ckpt_harness import phase
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.pipeline.cases import Case, run_case
from ckpt_harness.pipeline.explore import baseline
from ckpt_harness.inject.faults import Fault
from ckpt_harness.catalogue.scenario import select
from ckpt_harness.catalogue.scenario_files import builtin_catalogue
from ckpt_harness.verdict import Verdict
from ckpt_harness.pipeline.verify import verify

PLANTED = "tests.planted.async_jobs"
BG = phase.background(phase.save(4))


def prepared(job, tmp_path_factory):
    return baseline(job, world_size=2, steps=4, save="last", workdir=tmp_path_factory.mktemp(job.rpartition(":")[2]))


@pytest.fixture(scope="module")
def correct(tmp_path_factory):
    return prepared("dcp_async", tmp_path_factory)


def at(base, kind, rank, op, target):
    """The case of `kind` at rank `rank`'s first `op` on `target` in the background save of step 4."""
    point = next(p for p in base.points if (p.rank, p.phase, p.op) == (rank, BG, op) and target in p.target)
    return Case.of((Fault(kind, point.rank, point.phase, point.index),), [point])


def test_the_background_writer_has_a_phase_of_its_own(correct):
    """Its operations are points of `bg_save 4`, on its own thread, whatever
    the main thread did meanwhile; the main thread's save holds none of them."""
    writer = [e for r in correct.golden.ranks for e in r.events if e.phase == BG and e.point is not None]
    assert {e.fields.get("thread") for e in writer} == {"AsyncCheckpointExecutor_0"}
    assert {"step_000004/__0_0.distcp", "step_000004/__1_0.distcp", "step_000004/.metadata"} <= {
        e.path for e in writer}
    assert {p.phase for p in correct.points} >= {"save 4", BG}
    main = [p for p in correct.points if p.phase == "save 4"]
    assert main and not any(p.op == "write" and p.target.startswith("step_000004/") for p in main)
    # collectives of the writer ran on the job's checkpoint group, not the training one
    groups = {e.fields.get("group") for e in writer if e.kind.value == "collective"}
    assert groups and "0" not in groups


@pytest.mark.parametrize("kind, prop", [("crash", "atomic"), ("error", "preserving")])
def test_a_fault_in_the_background_writer_resumes_the_save_before(correct, kind, prop):
    result = run_case(correct, at(correct, kind, 0, "write", "__0_0.distcp"))
    assert (result.check, result.verdict) == (prop, Verdict.PASS), result.summary + "\n" + result.details
    assert result.cells[-1] == "S_prev"


def test_skipped_staging_leaks_the_next_step_into_the_checkpoint(tmp_path):
    """Verify's stopped run trains on to the next save while save 2 is in
    flight: the writer reads the live tensors after the optimizer step."""
    report = verify(f"{PLANTED}:SkipsStaging", world_size=2, steps=4, cases=["resume@2"], workdir=tmp_path)
    flagged = {(r.case, r.check) for r in report.failures()}
    assert ("resume@2", "state after load") in flagged, report.explain()
    assert {r.check for r in report.results if r.verdict is Verdict.FAIL} <= {"state after load", "final state"}


def test_a_swallowed_background_failure_is_flagged(correct, tmp_path_factory):
    base = prepared(f"{PLANTED}:SwallowsBackgroundFailure", tmp_path_factory)
    result = run_case(base, at(base, "error", 1, "write", "__1_0.distcp"))
    assert (result.check, result.verdict) == ("preserving", Verdict.FAIL), result.summary
    assert "surfaced on no rank" in result.summary and "published" in result.summary
    right = run_case(correct, at(correct, "error", 1, "write", "__1_0.distcp"))
    assert right.verdict is Verdict.PASS, right.summary


def test_latest_moved_before_the_background_save_landed_is_flagged(correct, tmp_path_factory):
    base = prepared(f"{PLANTED}:PublishesBeforeDurable", tmp_path_factory)
    result = run_case(base, at(base, "crash", 0, "rename", ".metadata"))
    assert (result.check, result.verdict, result.cells[-1]) == ("atomic", Verdict.FAIL, "refused"), result.summary
    right = run_case(correct, at(correct, "crash", 0, "rename", ".metadata"))
    assert right.verdict is Verdict.PASS, right.summary


def test_a_writer_on_the_training_group_hangs_with_every_thread_named(correct, tmp_path):
    # the deadline: ten times what the correct job's whole golden run took here, now
    deadline = max(8.0, 10 * correct.golden.outcome.elapsed)
    report = verify(f"{PLANTED}:SharesTrainingGroup", world_size=2, steps=2, timeout=deadline, workdir=tmp_path)
    live = next(r for r in report.failures() if r.case == "golden")
    assert live.check == "live" and live.summary.startswith("golden: hang"), live.summary
    for rank in (0, 1):  # each rank: its main thread in the barrier, its writer in DCP's gather
        assert "barrier" in live.summary and "on the main thread during save 2" in live.summary
        assert "on thread AsyncCheckpointExecutor_0 during bg_save 2" in live.summary
    assert live.details.count("in save_wrapper") == 2  # both writers' stacks are in the report


@pytest.mark.parametrize("job, verdict", [(f"{PLANTED}:PurgesAtReturn", "fail"), ("dcp_async", "pass")])
def test_old_checkpoints_purged_before_the_new_one_landed_are_flagged(tmp_path, job, verdict):
    """The catalogue's rotation-crash (keep_last=1; for a job that saves in
    the background, the last save, whose rotation it runs when it publishes,
    at the end), at its renames only: the writer's `.metadata` among them."""
    (rotation,) = select(builtin_catalogue(), ["rotation-crash"])
    rotation = dataclasses.replace(rotation, params={**rotation.params, "ops": ("rename",)})
    result = Bench(targets.job(job, world_size=2), tmp_path).run(rotation)
    assert result.verdict == verdict, result.explain()
    if verdict == "fail":
        assert "/ atomic: FAIL — crash at rank 0 " in result.details and "in bg_save " in result.details
        # `latest` names step 2, which rank 0's main thread was deleting as its writer was killed: gone
        # whole, or cut part way on a loaded machine (the directory left, its .metadata gone first)
        assert "`latest` points to a missing checkpoint" in result.details or re.search(
            r"refused: FileNotFoundError: .*step_000002/\.metadata'", result.details), result.details


@pytest.mark.parametrize("job, verdict, words", [
    ("tests.planted.async_jobs:RotatesByName", Verdict.FAIL,
     "after save 10 was published: the checkpoints of steps 7, 8, 9 remain; expected the checkpoints of steps "
     "8, 9, 10"),
    ("dcp_async", Verdict.PASS, "after each of 13 published saves exactly the newest 3 checkpoints remained"),
])
def test_retention_of_a_background_save_is_judged_as_it_is_published(tmp_path, job, verdict, words):
    """A job that saves in the background rotates as it publishes, with the
    newest save still in flight: right after save 4 returned, four checkpoints
    are there by design. Judged at each publication, the in-flight one
    neither kept nor missed, a rotation by name is still flagged."""
    (scenario,) = select(builtin_catalogue(), ["retention-order"])
    result = Bench(targets.job(job, timeout=30), tmp_path).run(scenario)
    assert result.verdict is verdict and words in result.reason + result.details, result.explain()
