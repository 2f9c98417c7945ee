"""Probes and fault kinds inside a real rank: what lands on disk, what the job sees."""

import json
import time

import pytest

from ckpt_harness.inject.faults import Fault, parse_plan, plan_label
from ckpt_harness.inject.trace import read_events
from ckpt_harness.launch import GroupSpec, run_group
from ckpt_harness.launch.group import STARTUP_TIMEOUT


def run(tmp_path, *faults):
    spec = GroupSpec(world_size=1, entry="tests.entries:file_ops_with_fault", run_dir=tmp_path / "run",
                     payload={"ckpt": str(tmp_path / "ckpt"), "faults": list(faults)}, deadline=STARTUP_TIMEOUT)
    start = time.monotonic()
    outcome = run_group(spec)
    result_file = tmp_path / "run" / "result.json"
    result = json.loads(result_file.read_text()) if result_file.exists() else {}
    events = [e.fields for e in read_events(tmp_path / "run" / "rank0.trace") if e.kind != "phase"]
    return outcome.ranks[0], result, events, time.monotonic() - start


MKDIR, WRITE, FSYNC, RENAME = "mkdir(step)", "write(step/blob.tmp)", "fsync(step/blob.tmp)", \
    "rename(step/blob.tmp->step/blob)"


def at(kind, address):
    """`kind` armed at the operation of save 1 named `address` (`faults.address`)."""
    return Fault(kind, 0, "save 1", None, at=address)


def test_probes_record_file_operations_relative_to_the_checkpoint_dir(tmp_path):
    rank, result, events, _ = run(tmp_path)
    assert rank.status == "ok" and result == {"written": 1000, "finished": True}
    ops = [(e["kind"], e.get("path") or f"{e['src']} -> {e['dst']}") for e in events if "point" in e]
    assert ops[:6] == [
        ("mkdir", "step"),  # os.makedirs: its mkdir is the point, not its looks on the way (`files._in_mkdir`)
        ("open", "step/blob.tmp"),
        ("buffered-write", "step/blob.tmp"),  # the job's write(), into its buffer
        ("write", "step/blob.tmp"),  # the flush: the bytes reach the kernel
        ("fsync", "step/blob.tmp"),
        ("rename", "step/blob.tmp -> step/blob"),
    ]
    assert ("open", "step/model.pt") in ops and ("write", "step/model.pt") in ops  # torch.save(path)
    assert not any("outside" in str(e) for e in events)
    points = [e["point"] + i for e in events if "point" in e for i in range(e.get("count", 1))]
    assert points == list(range(len(points)))  # every operation numbered, batched writes too


def test_crash_before_an_operation_leaves_it_undone(tmp_path):
    rank, result, events, _ = run(tmp_path, at("crash", RENAME))
    assert rank.status == "crashed" and rank.signal == 9 and not result
    assert (tmp_path / "ckpt/step/blob.tmp").exists() and not (tmp_path / "ckpt/step/blob").exists()
    assert any(e["kind"] == "fault" for e in events)


def test_crash_after_an_operation_leaves_it_done(tmp_path):
    rank, _, _, _ = run(tmp_path, at("crash-after", RENAME))
    assert rank.status == "crashed"
    assert (tmp_path / "ckpt/step/blob").exists()


def test_crash_mid_write_leaves_a_prefix(tmp_path):
    rank, _, _, _ = run(tmp_path, at("crash-mid", WRITE))
    assert rank.status == "crashed"
    assert (tmp_path / "ckpt/step/blob.tmp").read_bytes() == b"x" * 500


def test_torn_write_reports_success_but_lands_a_prefix(tmp_path):
    rank, result, events, _ = run(tmp_path, at("torn", WRITE))
    assert rank.status == "ok" and result["written"] == 1000
    assert (tmp_path / "ckpt/step/blob").read_bytes() == b"x" * 500
    write = next(e for e in events if e["kind"] == "write")
    assert write["n"] == 500 and write["data"] == [0, 500]
    assert (tmp_path / "run/rank0.data").read_bytes()[:500] == b"x" * 500


@pytest.mark.parametrize("kind, where, code", [("eio", WRITE, "EIO"), ("enospc", WRITE, "ENOSPC"),
                                               ("enospc", MKDIR, "ENOSPC"), ("eio", FSYNC, "EIO"),
                                               ("eio", RENAME, "EIO")])
def test_errno_faults_raise_with_the_right_errno(tmp_path, kind, where, code):
    rank, result, _, _ = run(tmp_path, at(kind, where))
    # a kernel write's error surfaces where the job flushes, after its write() returned
    assert rank.status == "ok" and result == {"errno": code, "finished": True} | (
        {"written": 1000} if where != MKDIR else {})


def test_error_raises_an_exception_naming_the_operation(tmp_path):
    rank, _, _, _ = run(tmp_path, at("error", RENAME))
    assert rank.status == "failed"
    assert "ckpt_harness injected an error into rename step/blob.tmp -> step/blob" in rank.log_text()


def test_delay_sleeps_then_goes_on(tmp_path):
    rank, result, _, elapsed = run(tmp_path, Fault("delay", 0, "save 1", None, seconds=1.0, at=MKDIR))
    assert rank.status == "ok" and result["finished"] and elapsed >= 1.0


def test_hang_blocks_until_the_deadline(tmp_path, pace):
    spec = GroupSpec(world_size=1, entry="tests.entries:file_ops_with_fault", run_dir=tmp_path / "run",
                     payload={"ckpt": str(tmp_path / "ckpt"), "faults": [at("hang", FSYNC)]}, deadline=pace(1.5))
    outcome = run_group(spec)
    assert outcome.timed_out and outcome.ranks[0].status == "hung"
    assert "file_ops_with_fault" in outcome.ranks[0].stack


def test_two_faults_fire_in_one_run(tmp_path):
    rank, result, events, _ = run(tmp_path, at("torn", WRITE), at("eio", RENAME))
    assert [e["fault"] for e in events if e["kind"] == "fault"] == ["torn", "eio"]
    assert result["errno"] == "EIO"


def test_fault_labels_round_trip():
    plan = (Fault("crash", 0, "save 4", 7), Fault("delay", 1, "save 4", 2, seconds=0.3))
    assert plan_label(plan) == "crash@r0:save4#7+delay@r1:save4#2~0.3"
    assert parse_plan(plan_label(plan)) == plan
    named = (Fault("hang", 1, "save 4", None, at="barrier", nth=3),
             Fault("crash", 0, "after_save 6", None, at="rename(a+b/latest.tmp->a+b/latest)"),
             Fault("delay", 0, "save 4", None, 0.3, at="stat(step 4)", nth=2))
    assert plan_label(named) == ("hang@r1:save4/barrier#3+crash@r0:after_save6/rename(a+b/latest.tmp->a+b/latest)"
                                 "+delay@r0:save4/stat(step 4)#2~0.3")
    assert parse_plan(plan_label(named)) == named
    assert [f.op for f in named] == ["collective", "rename", "stat"]
    with pytest.raises(ValueError, match="not a fault label"):
        parse_plan("crash-somewhere")
    with pytest.raises(ValueError, match="unknown fault kind 'explode'"):
        Fault("explode", 0, "save 4", 1)
