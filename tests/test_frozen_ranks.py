"""Frozen ranks: stopped with SIGSTOP, or holding the GIL in a C loop.

Neither dead nor raising, such a rank is judged as a hang is (its peers
fail in time, or the run is cut at its deadline and reported hung), but a
stack alone would mislead: the report must say that the rank was frozen,
and why a stopped rank's threads or a GIL-holding rank's Python helpers
(its flight recorder among them) did nothing.
"""

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.config import DEFAULT_FAULTS
from ckpt_harness.pipeline.explore import explore
from ckpt_harness.inject.faults import BLOCKING, Fault
from ckpt_harness.launch.group import STACK_GRACE
from ckpt_harness.oracle import health
from ckpt_harness.targets import PROPAGATION, RunRequest
from ckpt_harness.verdict import Verdict
from ckpt_harness.catalogue.scenario_files import parse
from tests.test_launch import alive

REF = "tests.planted.checkpointers:ReferenceCheckpointer"
FROZEN = ("sigstop", "gil")


def frozen_run(tmp_path, kind, deadline):
    """Rank 0 frozen before the first operation of the only save: the barrier rank 1 then waits in."""
    target = targets.job(REF, world_size=2, steps=2, save_every=2)
    return target.run(RunRequest("frozen run", faults=(Fault(kind, 0, "save 2", 0),), deadline=deadline,
                                 failure_grace=PROPAGATION), tmp_path / "ckpt", tmp_path / "run")


@pytest.mark.parametrize("kind", FROZEN)
def test_a_frozen_rank_is_a_hang_reported_with_every_stack_and_what_froze_it(tmp_path, pace, kind):
    deadline = pace(3.0)  # the job reaches its save in about 1 s on a quiet box
    run = frozen_run(tmp_path, kind, deadline)
    assert run.fired(), f"the deadline ({deadline:.1f}s) ended the run before the save"
    assert run.outcome.timed_out and not run.outcome.stuck_after_failure
    assert run.outcome.elapsed < deadline + STACK_GRACE + pace(1.0), (run.outcome.elapsed, pace)
    problem = health(run)
    assert problem.summary.startswith(f"hang: rank 0 {BLOCKING[kind]} before operation #0 of save 2; "
                                      "rank 1 waiting in barrier #"), problem.summary
    for rank in (0, 1):
        assert f"rank {rank} stack when the run was stopped" in problem.details
        assert "in _make_dir" in run.ranks[rank].outcome.stack  # where each one really was
    frozen, peer = (r.outcome for r in run.ranks)
    assert peer.collectives is not None and not peer.stopped
    if kind == "sigstop":
        # continued for its dumps: its stack and its recorder (a Python thread) both answered
        assert frozen.stopped and frozen.collectives is not None
        assert "the process was stopped (SIGSTOP)" in problem.details
        assert "collectives part at #" in problem.summary
    else:
        # the C loop never let the recorder's thread run; faulthandler, in C, still dumped every thread
        assert not frozen.stopped and frozen.collectives is None and "in hold_gil" in frozen.stack
        assert "did not answer within 2s; it held the GIL (the injected gil fault)" in problem.details
    assert not any(alive(r.pid) for r in run.outcome.ranks)  # a stopped process ignores all but SIGKILL


STALL = {"description": "d", "property": "live", "check": "stall", "mode": "frozen", "hang_timeout": 5.0}


def frozen_at_final_save(job, tmp_path, rank):
    """The catalogue's frozen-rank-at-save, for `rank`'s cases only (the other rank's are alike)."""
    cases = [f"{kind}@r{rank}:save6/barrier" for kind in FROZEN]
    return Bench(targets.job(job, world_size=2, timeout=30), tmp_path).run(parse("s", STALL), cases)


def test_frozen_rank_at_save_flags_peers_that_wait_forever(tmp_path):
    result = frozen_at_final_save(REF, tmp_path, rank=1)
    assert result.verdict == "fail" and result.cases == 2, result.explain()
    assert "rank 1 stopped by the injected SIGSTOP before collective barrier of save 6: hang:" in result.details
    assert "rank 1 holding the GIL in a C loop (injected gil fault) before collective barrier" in result.details
    assert "--case gil@r1:save6/barrier" in result.details


def test_frozen_rank_at_save_passes_a_job_whose_peers_time_out(tmp_path):
    result = frozen_at_final_save("tests.planted.scenario_jobs:TimedBarrier", tmp_path, rank=0)
    assert result.verdict == "pass" and result.cases == 2, result.explain()


def test_explore_injects_frozen_ranks_only_when_asked_and_judges_them_as_crashes(tmp_path):
    """The resume is judged as after a crash (atomic: S_prev), and the peer
    left waiting for good for the frozen rank is said, as the catalogue's
    frozen-rank-at-save says it (above): a live FAIL riding beside it (issue 64)."""
    assert not set(BLOCKING) & set(DEFAULT_FAULTS)  # each case costs a deadline
    report = explore(REF, world_size=2, workdir=tmp_path, faults=FROZEN, corruptions=(), ops=("rename",),
                     after=False)
    judged = {(r.check, r.verdict, r.cells[5]) for r in report.results if r.cells}
    assert judged == {("live", Verdict.FAIL, "sigstop"), ("live", Verdict.FAIL, "gil")}, report.table()
    for r in (r for r in report.results if r.cells):
        assert [(a.check, a.verdict) for a in r.also] == [("atomic", Verdict.PASS)], report.explain()
        assert "rank 1 waited for good" in r.summary, r.summary
