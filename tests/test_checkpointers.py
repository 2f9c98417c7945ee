"""Fault-free verification of the checkpointers in tests/checkpointers.py.

Without faults every one of them resumes bitwise, except Rank0OnlyBarrier,
whose first save never returns. Telling the reference from the planted bugs
is the job of the fault-injection tests.
"""

import json

import pytest

from ckpt_harness import Verdict

PASSING = [
    "ReferenceCheckpointer",
    "LatestBeforeShards",
    "RenameWithoutFsync",
    "InPlaceOverwrite",
    "DeletesPreviousFirst",
    "SkipsMissingFile",
    "LoadErrorBlocksPeers",
]


@pytest.mark.parametrize("job", PASSING)
def test_checkpointer_resumes_bitwise_without_faults(ckpt, job):
    report = ckpt.verify(f"tests.planted.checkpointers:{job}", steps=4)
    report.assert_ok()
    checked = [(r.case, r.check) for r in report.results if r.check in ("state after load", "final state")]
    assert checked == [(f"resume@{k}", c) for k in (2, 4) for c in ("state after load", "final state")]


@pytest.mark.ckpt(world_size=2)
def test_rank0_only_barrier_in_every_save_is_a_hang(ckpt, pace):
    report = ckpt.verify("tests.planted.checkpointers:Rank0OnlyBarrier", steps=4, timeout=pace(3.0))
    live = report.results[0]
    assert live.verdict is Verdict.FAIL, report.explain()
    assert "hang" in live.summary, report.explain()
    # rank 0 sits in its extra barrier, rank 1 already in the save's all_gather_object
    assert "rank 0 waiting in barrier" in live.summary and "during save 2" in live.summary
    assert "rank 1 waiting in all_gather_object" in live.summary


@pytest.mark.ckpt(world_size=[1, 4])
def test_reference_with_keep_last_1_keeps_only_the_newest_committed_checkpoint(ckpt, tmp_path):
    workdir = tmp_path / "verify"
    report = ckpt.verify("tests.planted.checkpointers:ReferenceCheckpointer", steps=4, keep_last=1, workdir=workdir)
    report.assert_ok()
    ckpt_dir = workdir / "golden" / "ckpt"
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step_000004"]
    files = ["model.pt", "optimizer.pt", "scheduler.pt"] + [f"rank{r}.pt" for r in range(ckpt.world_size)]
    final = ckpt_dir / "step_000004"
    assert sorted(p.name for p in final.iterdir()) == sorted(files + ["manifest.json"])
    manifest = json.loads((final / "manifest.json").read_text())
    assert (manifest["step"], manifest["world_size"]) == (4, ckpt.world_size)
    assert sorted(manifest["files"]) == sorted(files)
    assert all(manifest["files"][f]["size"] == (final / f).stat().st_size for f in files)
