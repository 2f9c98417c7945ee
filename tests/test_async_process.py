"""Async checkpointing, issue 11 part 3: probes in DCP's checkpoint process
(the PROCESS executor), and a hard preemption that does not wait for the
save in flight.

The process executor spawns a fresh interpreter per rank (about 5 s each),
so one prepared baseline of `dcp_async_process` serves every test here that
needs one; the planted process variant borrows it (its fault-free run is the
correct job's, line for line: it differs only in what it does once a save
failed). World size 2, 4 steps.
"""

import dataclasses
import signal

import pytest

from ckpt_harness import phase
from ckpt_harness.pipeline.cases import Case, run_case
from ckpt_harness.pipeline.explore import baseline
from ckpt_harness.inject import durability
from ckpt_harness.inject.faults import Fault
from ckpt_harness.inject.trace import fields
from ckpt_harness.jobref import resolve
from ckpt_harness.launch.outcome import Cut
from ckpt_harness.oracle import health
from ckpt_harness.records import data_reader
from ckpt_harness.pipeline.memo import Memo
from ckpt_harness.targets import RunRequest
from ckpt_harness.verdict import Verdict
from ckpt_harness.pipeline.verify import verify

PLANTED = "tests.planted.async_jobs"
BG = phase.background(phase.save(4))


@pytest.fixture(scope="module")
def process_job(tmp_path_factory):
    return baseline("dcp_async_process", world_size=2, steps=4, save="last",
                    workdir=tmp_path_factory.mktemp("dcp_async_process"))


def borrowed(base, job):
    """`base` as the baseline of `job`, a planted variant whose fault-free run is `base`'s job's."""
    target = dataclasses.replace(base.target, config=dataclasses.replace(base.target.config, job=resolve(job)[0]))
    return dataclasses.replace(base, target=target, resumes=Memo())


def at(base, kind, rank, op, target):
    point = next(p for p in base.points if (p.rank, p.phase, p.op) == (rank, BG, op) and target in p.target)
    return Case.of((Fault(kind, point.rank, point.phase, point.index),), [point])


def test_the_checkpoint_process_is_traced(process_job):
    """Its writes and collectives are points of `bg_save 4`, each event naming
    the process; every byte it wrote was seen (no unseen writes) and the
    power-loss model replays the golden trace."""
    child = [e for r in process_job.golden.ranks for e in r.events if e.phase == BG and e.point is not None]
    assert child and all(e.fields.get("process") == "checkpoint process" for e in child)
    assert {"step_000004/__0_0.distcp", "step_000004/__1_0.distcp", "step_000004/.metadata"} <= {e.path for e in child}
    assert any(e.kind.value == "collective" for e in child)
    assert process_job.unseen == (), process_job.unseen
    golden = process_job.golden  # the model replays its bytes: the save's files, byte for byte
    rebuilt = durability.process_crash(durability.Snapshot(), fields(golden.events()), data_reader(golden.run_dir))
    assert rebuilt == durability.snapshot(golden.run_dir.parent / "ckpt")
    # the rank's own threads have no point there: one numbering per phase
    assert not [e for r in process_job.golden.ranks for e in r.events
                if e.phase == BG and e.point is not None and not e.fields.get("process")]


def test_a_crash_in_the_checkpoint_process_resumes_the_save_before(process_job):
    result = run_case(process_job, at(process_job, "crash", 0, "write", "__0_0.distcp"))
    assert (result.check, result.verdict, result.cells[-1]) == ("atomic", Verdict.PASS, "S_prev"), \
        result.summary + "\n" + result.details


def test_a_swallowed_death_of_the_checkpoint_process_is_flagged(process_job):
    base = borrowed(process_job, f"{PLANTED}:SwallowsChildFailure")
    result = run_case(base, at(base, "crash", 0, "write", "__0_0.distcp"))
    assert (result.check, result.verdict) == ("atomic", Verdict.FAIL), result.summary
    assert "published" in result.summary, result.summary


def test_a_hard_stop_resumes_the_newest_published_save(tmp_path):
    """dcp_async parks with save 4 in flight: `latest` still names save 2."""
    report = verify("dcp_async", world_size=2, steps=4, cases=["hard@4"], workdir=tmp_path)
    judged = [r for r in report.results if r.case == "hard@4"]
    assert [(r.check, r.verdict) for r in judged] == [("atomic", Verdict.PASS)], report.explain()
    assert "newest published: 2" in judged[0].summary and "S_prev" in judged[0].summary


def test_a_save_claimed_published_and_lost_to_a_hard_stop_is_flagged(tmp_path):
    report = verify(f"{PLANTED}:ClaimsPublishedAtReturn", world_size=2, steps=4, cases=["hard@4", "resume@4"],
                    workdir=tmp_path)
    failed = {(r.case, r.check) for r in report.failures()}
    assert failed == {("hard@4", "atomic")}, report.explain()  # a graceful stop lets the write land
    hard = next(r for r in report.failures())
    assert "newest published: 4" in hard.summary and "refused" in hard.summary, hard.summary


def test_a_hang_in_the_checkpoint_process_is_reported_there(process_job, tmp_path):
    """The run is cut `blocked_grace` after the checkpoint process blocked (it
    reports through its rank's pipe); each rank's place names its checkpoint
    process, the one the hang blocked and the peer's, waiting for it in DCP's
    gather, and the report has both processes' stacks."""
    first = phase.background(phase.save(2))
    gather = next(e for e in process_job.golden.ranks[0].events
                  if e.phase == first and e.point is not None and e.collective == "gather_object")
    run = process_job.target.run(RunRequest("hung", stop_after_save=4, faults=(Fault("hang", 0, first, gather.point),),
                                            blocked_grace=2.0), tmp_path / "ckpt", tmp_path / "run")
    assert run.outcome.cut is Cut.BLOCKED, run.outcome
    mine, peer = (run.ranks[r].where() for r in (0, 1))
    assert mine.startswith("blocked by the injected hang in checkpoint process ") and first in mine, mine
    assert peer.startswith("waiting in checkpoint process ") and "gather_object" in peer, peer
    stacks = [run.ranks[r].outcome.children.get("checkpoint process", "") for r in (0, 1)]
    assert "in block" in stacks[0] and "in gather_object" in stacks[1], stacks
    details = health(run).details
    assert "rank 0's checkpoint process stack when the run was stopped:" in details
    assert "rank 1's checkpoint process stack when the run was stopped:" in details


def test_a_preemption_notice_in_the_checkpoint_process_reaches_every_rank(process_job, tmp_path):
    """A scheduler signals every process of the job: the notice fired in rank 0's checkpoint process, at its
    first file, SIGTERMs both ranks too (their beacons name them), not that process alone, and neither rank
    has a handler, so both die of it at once."""
    first = next(p for p in process_job.points if (p.rank, p.phase, p.op) == (0, BG, "open"))
    run = process_job.target.run(RunRequest("noticed", stop_after_save=4, faults=(first.fault("preempt", 5.0),),
                                            failure_grace=6.0), tmp_path / "ckpt", tmp_path / "run")
    assert run.fired(), run.outcome
    assert [r.outcome.signal for r in run.ranks] == [signal.SIGTERM, signal.SIGTERM], [r.outcome for r in run.ranks]
