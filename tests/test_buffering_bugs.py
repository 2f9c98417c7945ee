"""Bugs that live in a process's write buffers, which the probes used to hide
by making every file under the checkpoint directory unbuffered (issue 13):
an fsync before the buffer is flushed, and a crash while bytes the job wrote
are still in its buffer. Each planted bug is flagged, its fixed twin passes.
"""


from ckpt_harness.pipeline.cases import Case, run_case
from ckpt_harness.pipeline.explore import baseline, explore
from ckpt_harness.pipeline.workdir import dir_prefix
from ckpt_harness.verdict import Verdict

PLANTED = "tests.planted.checkpointers:"
POWER_LOSS_AFTER = dict(faults=("power-loss",), corruptions=(), cases=["power-loss-after"])
#: The crash kinds at every rename: the pointer commit is the one rename of a save.
AT_THE_COMMIT = dict(faults=("crash", "crash-after"), ops=("rename",), corruptions=())


def case_dir(workdir, case):
    """Where exploration ran `case` (`workdir.fresh_dir` names it)."""
    (found,) = (workdir / "cases").glob(dir_prefix(case) + "-*")
    return found


def outcomes(report):
    return {(r.cells[5], r.check, r.verdict, r.cells[-1]) for r in report.results}


def test_fsync_before_flush_loses_the_manifest_at_power_loss_after_the_save(tmp_path):
    """DCP's `.metadata` bug: the save returned, the manifest's fsync ran
    before its bytes left the buffer, and power loss empties it."""
    report = explore(f"{PLANTED}FsyncBeforeFlush", world_size=2, workdir=tmp_path, **POWER_LOSS_AFTER)
    (durable,) = report.results
    assert (durable.check, durable.verdict, durable.cells[-1]) == ("durable", Verdict.FAIL, "refused"), \
        report.explain()
    # every manifest is lost, not only step 4's: neither was ever synced after its write
    assert "power loss lost step_000002/manifest.json: written after its last fsync (" in durable.summary
    for step in ("000002", "000004"):
        assert f"step_{step}/manifest.json: written after its last fsync (" in durable.details, durable.details
    assert durable.details.count("bytes now, 0 bytes as of that fsync)") == 2, durable.details


def test_flush_then_fsync_keeps_the_manifest_at_power_loss_after_the_save(tmp_path):
    report = explore(f"{PLANTED}FlushThenFsync", world_size=2, workdir=tmp_path, **POWER_LOSS_AFTER)
    (durable,) = report.results
    assert (durable.check, durable.verdict, durable.cells[-1]) == ("durable", Verdict.PASS, "S_k"), report.explain()
    assert "did not keep" not in durable.details, durable.details  # nothing at all was lost


def test_a_pointer_committed_before_its_files_are_closed_is_not_atomic(tmp_path):
    """A crash right after `latest` is renamed into place kills the process
    with each file's last piece still in its buffer: the resume finds a
    committed checkpoint of truncated files."""
    report = explore(f"{PLANTED}PointerBeforeClose", world_size=2, workdir=tmp_path, **AT_THE_COMMIT)
    assert outcomes(report) == {
        ("crash", "atomic", Verdict.PASS, "S_prev"),  # the pointer still names step 2
        ("crash-after", "atomic", Verdict.FAIL, "refused without naming a file or rank"),
    }, report.table()
    (failed,) = report.failures()
    assert failed.case.startswith("crash-after@r0:") and "rename latest.tmp -> latest" in failed.summary
    # what the resume was given: each file of rank 0 lacks its tail, the
    # pieces (4 KiB, the buffer holds whole ones) still in the buffer
    crashed = case_dir(tmp_path, failed.case) / "ckpt"
    sizes = {p.name: p.stat().st_size for p in (crashed / "step_000004").iterdir()}
    full = {p.name: p.stat().st_size for p in (tmp_path / "golden" / "ckpt" / "step_000004").iterdir()}
    assert (crashed / "latest").read_text() == "step_000004\n"
    for name in ("model.pt", "optimizer.pt", "scheduler.pt", "rank0.pt"):
        assert sizes[name] < full[name] and sizes[name] % 4096 == 0, (name, sizes, full)


def test_closing_the_files_before_the_pointer_is_atomic(tmp_path):
    report = explore(f"{PLANTED}CloseBeforePointer", world_size=2, workdir=tmp_path, **AT_THE_COMMIT)
    assert outcomes(report) == {
        ("crash", "atomic", Verdict.PASS, "S_prev"),
        ("crash-after", "atomic", Verdict.PASS, "S_k"),
    }, report.table()


def test_a_crash_after_a_buffered_write_is_judged_on_the_shorter_file(tmp_path):
    """`InPlaceOverwrite` rewrites `current/scheduler.pt` (1389 bytes in one
    `write()`, less than the buffer `open` gives it) under the old
    `meta.json`. Killed right after that write() returned, the bytes die in
    the buffer: the file the resume reads is empty and the resume refuses it. (When the probes made
    every file unbuffered, the bytes reached the file and the resume loaded a
    mix of steps 2 and 4: the same FAIL, judged on a file no real crash leaves.)"""
    base = baseline(f"{PLANTED}InPlaceOverwrite", world_size=2, workdir=tmp_path)
    (point,) = [p for p in base.points if (p.rank, p.op, p.target) == (0, "buffered-write", "current/scheduler.pt")]
    written = (tmp_path / "committed" / "ckpt" / "current" / "scheduler.pt").stat().st_size
    assert 0 < written < 4096  # a buffer is at least a 4 KiB block
    result = run_case(base, Case.of((point.fault("crash-after"),), base.points))
    assert (result.check, result.verdict) == ("atomic", Verdict.FAIL), result.summary
    assert "EOFError: Ran out of input" in result.summary, result.summary
    crashed = case_dir(tmp_path, result.case) / "ckpt" / "current"
    assert (crashed / "scheduler.pt").read_bytes() == b""
    assert (crashed / "meta.json").read_text() == '{"step": 2}'
