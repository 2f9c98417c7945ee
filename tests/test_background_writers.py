"""Saves written in the background (issue 43): with nothing to wait on, and
with training going on while they are written.

`tests/scripts/pool_writer.py` saves as Lightning's `AsyncCheckpointIO`
does: a snapshot handed to a one-thread pool, no future kept. Its save
lands when the pool's task is done (`inject.writers`), so a run stopped
after save k lets that task finish first, and the operations of the task
are points of the save's background phase. Under real torchrun (at 2 ranks where
what one rank does and another does not is part of the test, else at 1):

- delays on every operation of the correct writer change nothing (before,
  the run stopped with the writer in flight and a delay made the resume
  take the save before: a false skew-safe FAIL), through the CLI;
- its twin that points `latest` from the main thread before the writer
  landed is flagged atomic at the writer's rename; the correct one is not;
- hard-preemption runs on it (before: n/a, "its saves returned once written").

And snapshot-consistent (`slow-background-save`: a save's writers start
only once training went on past it): its twin that hands the writer the
live tensors is flagged naming the keys and ranks; so is a Job whose
`dcp.async_save` stages nothing (pytorch#144657), while `dcp_async` passes;
a Job that saves synchronously, or a script whose only save is its last,
has nothing in flight while training goes on (n/a).

And a writer that never comes back (`final-save-writer-frozen`): a trainer
that waits for it without a timeout is flagged live, with both stacks.
"""

import json
import re
from pathlib import Path

import pytest

from ckpt_harness.pipeline.explore import explore_script
from ckpt_harness.records import Kind, read_records
from ckpt_harness.verdict import Verdict
from tests.clirun import cli

POOL_WRITER = Path(__file__).resolve().parent / "scripts" / "pool_writer.py"
BG = "bg_save4"
#: The line of pool_writer.py where the main thread waits for its writer at the end.
WAITS_AT_END = next(n for n, line in enumerate(POOL_WRITER.read_text().splitlines(), 1) if line == "written.wait()")


def script(*flags: str, steps: int = 6) -> str:
    return " ".join([str(POOL_WRITER), "{ckpt_dir}", "--steps", str(steps), *flags])


def scenario_of(name: str, tmp_path: Path, *flags: str, steps: int = 4, cold: bool = False):
    """`ckpt-harness scenario NAME` on the pool writer with `flags`, in a directory of its own (absolute: the
    in-process fork server keeps the first call's directory). `cold`: workers started cold, for a run
    expected to fail, which warm would be run twice (warm, then cold to confirm). One worker: what these
    scenarios judge is rank 0's writer."""
    where = tmp_path / ("-".join(flags) or "plain")
    where.mkdir()
    return cli("scenario", name, "--script", script(*flags, steps=steps), "--nproc-per-node", "1",
               *(("--cold-start",) if cold else ()), "--workdir", str(where / "work"), cwd=where)


@pytest.mark.slow
def test_delays_on_every_operation_of_a_pool_writer_without_a_future_change_nothing(tmp_path):
    out = cli("explore", "--script", script(), "--nproc-per-node", "2", "--save", "4", "--faults", "delay",
              "--corruptions", "", "--no-after", "--json", "report.json", "--workdir", "work", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    report = json.loads((tmp_path / "report.json").read_text())
    cases = [c for c in report["cases"] if c["case"] != "golden"]
    writer = [c for c in cases if f":{BG}/" in c["case"]]
    # the file written in the temp directory and moved in is followed there: no byte of it goes unseen
    assert not any("step_4.pt" in w for w in report["warnings"]), report["warnings"]
    # the writer's whole save: its file written outside and named by where it lands, the rename of it into
    # place, the pointer written and renamed after it
    ops = {(c["row"]["op"], c["row"]["target"]) for c in writer}
    staged = "<outside> (renamed in as step_4.pt)"
    whole = {("open", staged), ("write", staged), ("fsync", staged), ("rename", "<outside> -> step_4.pt"),
             ("write", "latest.tmp"), ("rename", "latest.tmp -> latest")}
    assert whole <= ops, ops
    assert all(c["verdict"] == "pass" and c["check"] == "skew-safe" and c["row"]["outcome"] == "S_k"
               for c in cases), json.dumps(cases, indent=1)
    for rank in range(2):  # the stop of every case waited for save 4 to land, and only then stopped
        stop = read_records(next((tmp_path / "work" / "cases").glob("*/fault")), rank)
        events = [(r["event"], r.get("step")) for r in stop]
        assert (Kind.SAVED, 4) in events and events[-1] == (Kind.STOPPED, 4), events
        assert ((Kind.LANDED, 4) in events) == (rank == 0), events  # rank 0 alone hands a write to its pool


def test_a_pointer_moved_before_the_pool_writer_landed_is_flagged_atomic(tmp_path):
    targeted = dict(nproc_per_node=1, save=4, faults=("crash",), ops=("rename",), corruptions=(), after=False)
    broken = explore_script(script("--bug", "latest-early"), workdir=tmp_path / "broken", **targeted)
    failed = {r.case: r for r in broken.results if r.verdict is Verdict.FAIL}
    writer = failed.get(f"crash@r0:{BG}/rename(<outside>->step_4.pt)")
    assert writer is not None and writer.check == "atomic", broken.explain()
    assert "refused: FileNotFoundError" in writer.summary and "step_4.pt" in writer.summary
    # Where save 2's writer is still in flight at save 4 (slower than two training steps), the crash at the
    # main thread's move of `latest` leaves it naming step_2.pt, not there yet: the same bug, also flagged.
    assert set(failed) <= {writer.case, "crash@r0:save4/rename(latest.tmp->latest)"}, broken.explain()
    assert all(r.check == "atomic" and "refused: FileNotFoundError" in r.summary for r in failed.values())
    # the hint speaks of the writer, not of ordering ranks by a collective
    assert "usual fix: publish a background save (its rename into place, the pointer, the rotation) from its " \
           "writer once its last file landed" in broken.explain(), broken.explain()
    correct = explore_script(script(), workdir=tmp_path / "correct", **targeted)
    assert correct.verdict is Verdict.PASS, correct.explain()
    assert {r.case for r in correct.results} >= {f"crash@r0:{BG}/rename(<outside>->step_4.pt)",
                                                 f"crash@r0:{BG}/rename(latest.tmp->latest)"}


def test_hard_preemption_runs_on_a_pool_writer(tmp_path):
    out = cli("scenario", "hard-preemption", "--script", script(), "--nproc-per-node", "2", "--workdir", "work",
              cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "hard-preemption [pool_writer.py --steps 6] atomic: PASS" in out.stdout, out.stdout
    stops = sorted((tmp_path / "work" / "hard-preemption").glob("hard@*/stop"))
    assert [stop.parent.name for stop in stops] == ["hard@2", "hard@4", "hard@6"], stops
    for stop in stops:  # each rank stopped after save k; its writer, not waited for, may land before or after
        k = int(stop.parent.name.partition("@")[2])
        for rank in range(2):
            events = [(r["event"], r.get("step")) for r in read_records(stop, rank)]
            assert events.index((Kind.SAVED, k)) < events.index((Kind.STOPPED, k)), events


def slow(*target: str, cwd: Path):
    cwd.mkdir(parents=True, exist_ok=True)  # absolute: the in-process fork server keeps the first call's directory
    return cli("scenario", "slow-background-save", *target, "--workdir", str(cwd / "work"), cwd=cwd)


def test_a_pool_writer_handed_the_live_tensors_is_flagged_snapshot_consistent(tmp_path):
    """Its save 2 lands while step 3 runs: the checkpoint holds step 3's
    weights and Adam's step 3 beside the save's own step 2, and every save
    after the resume is off by a step. The twin that copies passes."""
    # One worker: each rank's pool writer is its own (a second is a fresh interpreter, no case of its own).
    torn = slow("--script", script("--bug", "live-tensors", steps=4), "--nproc-per-node", "1", "--cold-start",
                cwd=tmp_path / "torn")  # it fails: cold at once, not warm and then again cold to confirm
    assert torn.returncode == 1, torn.stdout + torn.stderr
    assert "slow-background-save [pool_writer.py --steps 4 --bug live-tensors] snapshot-consistent: FAIL" in torn.stdout
    assert "slow@2 / saves after resume: FAIL — save 4 differs from the uninterrupted run's: rank 0" in torn.stdout
    # Adam's step ahead: the writer serialized after one optimizer step past the save, or two (it runs beside them)
    assert re.search(r"observed\.\*\.step \(2 keys\): 1 of 1 elements differ; first at index \[\]: [56]\.0, "
                     r"expected 4\.0", torn.stdout), torn.stdout
    right = slow("--script", script(steps=4), "--nproc-per-node", "1", cwd=tmp_path / "right")
    assert right.returncode == 0, right.stdout + right.stderr
    assert "snapshot-consistent: PASS" in right.stdout, right.stdout


def test_a_job_whose_async_save_stages_nothing_is_flagged_once_training_overlaps_its_writer(tmp_path):
    torn = slow("--job", "tests.planted.async_jobs:HandsLiveTensors", cwd=tmp_path / "torn")
    assert torn.returncode == 1, torn.stdout + torn.stderr
    assert "slow@2 / state after load: FAIL — state after load vs. state saved at step 2 differs" in torn.stdout
    for rank in (0, 1):  # every rank's shard holds step 3's moments, and Adam's step 3
        assert f"rank {rank}:\n  model/* (6 keys): values differ" in torn.stdout, torn.stdout
    assert re.search(r"optim/\*/step \(6 keys\): 1 of 1 elements differ; first at index \[\]: [34]\.0, "
                     r"expected 2\.0", torn.stdout), torn.stdout
    right = slow("--job", "dcp_async", cwd=tmp_path / "right")
    assert right.returncode == 0 and "snapshot-consistent: PASS" in right.stdout, right.stdout + right.stderr
    stop = read_records(tmp_path / "right" / "work" / "slow-background-save" / "slow@2" / "stop", 0)
    assert stop[-1]["event"] == Kind.STOPPED and stop[-1]["held"] == "training", stop[-1]  # it did overlap


def test_nothing_in_flight_while_training_goes_on_is_no_case(tmp_path):
    """A Job that saves synchronously, and a script whose only save is its last: n/a, saying why."""
    out = slow("--job", "dcp", cwd=tmp_path / "sync")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "slow-background-save [dcp] snapshot-consistent: N/A — the job saves synchronously" in out.stdout, \
        out.stdout
    once = slow("--script", script(steps=2), "--nproc-per-node", "1", cwd=tmp_path / "once")
    assert once.returncode == 0, once.stdout + once.stderr
    assert "N/A — the script saves once, at the end: nothing trains after that save" in once.stdout, once.stdout


def test_a_trainer_that_waits_for_its_frozen_writer_without_a_timeout_is_flagged_live(tmp_path):
    """final-save-writer-frozen: the pool task writing the last save blocks
    for good at its first operation (the open of the file it stages in the
    system's temp directory: `tempfile.mkstemp`), the rank's own
    thread goes on. `pool.shutdown(wait=True)` (Lightning's teardown too)
    waits for it for good: a hang, with the writer's stack and the main
    thread's. Its twin waits a second for the last write, then leaves."""
    stuck = scenario_of("final-save-writer-frozen", tmp_path, cold=True)
    assert stuck.returncode == 1, stuck.stdout + stuck.stderr
    assert "rank 0's writer blocked before open <outside> (renamed in as step_4.pt) of bg_save 4: rank 0 waited " \
           "for its frozen writer for good" in stuck.stdout, stuck.stdout
    assert "rank 0 (its thread ThreadPoolExecutor-" in stuck.stdout and \
           ") blocked by the injected hang before operation #0 of bg_save 4, its main thread going on" in stuck.stdout
    assert ' in write\n' in stuck.stdout and "concurrent/futures/thread.py" in stuck.stdout, stuck.stdout
    assert ' in shutdown\n' in stuck.stdout, stuck.stdout  # the main thread, joining the pool at the end
    right = scenario_of("final-save-writer-frozen", tmp_path, "--writer-timeout", "1")
    assert right.returncode == 0, right.stdout + right.stderr
    assert "live: PASS" in right.stdout and "every rank ended within 5s of the frozen writer" in right.stdout


def test_a_trainer_that_waits_without_a_timeout_for_a_writer_that_raised_is_flagged_live(tmp_path):
    """The writer's thread raises (the injected error at its first file operation of the final save): the
    correct writer keeps the error and the main thread raises it at the end; its twin waits for good on an
    event the writer sets only once it succeeded (deepspeedai/DeepSpeed#7741), and the deadline finds it there.
    The correct one first: its faulted run, here and now, sets the twin's deadline (the same run, but for the
    wait at the end): three times it, doubled for the twin's cold start (a cold worker imports torch itself,
    about twice a warm run's time on the 2-core box), and never under 15 s (it was a fixed 45 s)."""
    targeted = dict(nproc_per_node=1, save="last", faults=("error",), ops=("open",), corruptions=(), after=False)
    case = "error@r0:bg_save6/open(latest.tmp)"
    correct = explore_script(script("--pg-timeout", "600"), workdir=tmp_path / "correct", cases=[case],
                             timeout=45.0, **targeted)
    assert case in {r.case for r in correct.results} and correct.verdict is Verdict.PASS, correct.explain()
    took = next(r for r in correct.results if r.case == case).timings.fault_run
    assert took > 0, correct.explain()
    broken = explore_script(script("--bug", "waits-event", "--pg-timeout", "600"), workdir=tmp_path / "broken",
                            cases=[case], cold_start=True, timeout=max(15.0, 2 * 3 * took),
                            **targeted)  # cold: its deadline waited out once
    result = next(r for r in broken.results if r.case == case)
    assert (result.check, result.verdict) == ("live", Verdict.FAIL), broken.explain()
    assert "the injected error ended rank 0's writer of save 6 and no thread of the rank raised it" in result.summary
    waits = f'pool_writer.py", line {WAITS_AT_END} in <module>'
    assert waits in result.details, result.details  # rank 0's stack: its main thread, where it waits
    assert "usual fix: wait for a writer through what it ends either way" in broken.explain()


def test_a_file_staged_outside_and_moved_in_is_judged_by_the_power_loss_model(tmp_path):
    """The writer stages its file in the system's temp directory and moves it
    in, as fsspec's local transaction does. The probes follow that file
    (before, the power-loss model gave up on a rename from outside: UNKNOWN):
    fsynced before the move, save 4 survives a power loss right after it;
    moved in unsynced (fsspec's and so Lightning's way), it comes back empty."""
    right = scenario_of("power-loss-after-save", tmp_path)
    assert right.returncode == 0, right.stdout + right.stderr
    assert "durable: PASS — power-loss-after: power loss right after the save returned → S_k (step 4)" in right.stdout
    unsynced = scenario_of("power-loss-after-save", tmp_path, "--bug", "stage-unsynced")
    assert unsynced.returncode == 1, unsynced.stdout + unsynced.stderr
    assert "durable: FAIL" in unsynced.stdout, unsynced.stdout
    assert "step_4.pt: 4301 bytes written but never fsynced: it comes back with 0 bytes" in unsynced.stdout
    assert "made 3 times" not in unsynced.stdout  # nothing is armed that could fail to fire: one run


PROCESS_WRITER = POOL_WRITER.parent / "process_writer.py"


def test_a_trainer_whose_checkpoint_process_is_never_told_to_exit_hangs_at_exit_and_is_not_passed(tmp_path):
    """DeepSpeed's decoupled engine without `engine.destroy()`: the script
    returns, and its interpreter waits at exit, for good, for the checkpoint
    process it never told to exit (multiprocessing joins its children). The
    run used to read "all ranks finished" at the deadline: live PASS. It is
    a hang at exit, with the stack of the join; the twin that closes its
    process ends. The harness sees no save of it (the state goes to the
    process serialized in memory), so only how the runs end is judged
    here, and the deadline of the hang is three times the twin's run."""
    from ckpt_harness.pipeline.verify import verify_script

    def golden(*flags: str, timeout: float):
        report = verify_script(" ".join([str(PROCESS_WRITER), "{ckpt_dir}", *flags]), nproc_per_node=1,
                               workdir=tmp_path / ("-".join(flags) or "closed"), timeout=timeout)
        return next(r for r in report.results if (r.case, r.check) == ("golden", "live")), report

    closed, report = golden(timeout=120)
    assert closed.verdict is Verdict.PASS, report.explain()
    took = float(re.search(r"finished in ([\d.]+)s", closed.summary)[1])
    stuck, report = golden("--bug", "never-closed", timeout=max(15.0, 3 * took))
    assert stuck.verdict is Verdict.ERROR, report.explain()
    assert "at its exit, every rank's script returned (hang: rank 0 returned from the script, then never exited" \
           in stuck.summary, stuck.summary
    assert re.search(r'multiprocessing/util\.py", line \d+ in _exit_function', stuck.details), stuck.details
