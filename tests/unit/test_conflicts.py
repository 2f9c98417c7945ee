"""single-writer (`oracle.conflicts`) on hand-built traces: what counts as
two ranks on one path in one save, and what does not."""

import pytest

from ckpt_harness.oracle.conflicts import conflicts, judge_single_writer
from ckpt_harness.verdict import Verdict
from tests.unit.synthetic import rank, run

P = pytest.param


def opened(builder, path, phase="save 4", caller="train.py:30 in save()"):
    return builder.event("open", phase, path=path, fid="f", mode="wb", trunc=True, create=True, caller=caller)


@pytest.mark.parametrize("ranks, found", [
    P((opened(rank(0), "step_4/model.pt"), opened(rank(1), "step_4/model.pt")),
      ["save 4: step_4/model.pt by ranks 0, 1 (rank 0 writes it at train.py:30 in save(); rank 1 writes it at "
       "train.py:30 in save())"], id="two-ranks-write-one-file"),
    P((rank(0).event("rename", "save 4", src="tmp-4", dst="ckpt-4"),
       rank(1).event("rename", "save 4", src="tmp-4", dst="ckpt-4")),
      ["save 4: ckpt-4 by ranks 0, 1 (rank 0 renames onto it; rank 1 renames onto it)",
       "save 4: tmp-4 by ranks 0, 1 (rank 0 renames it away; rank 1 renames it away)"], id="each-node-renames"),
    P((rank(0).event("rmtree", "after_save 4", path="step_2"), rank(1).event("rmtree", "after_save 4", path="step_2")),
      ["save 4: step_2 by ranks 0, 1 (rank 0 deletes it; rank 1 deletes it)"], id="both-rotate-after-the-save"),
    P((opened(rank(0), "latest.tmp", phase="bg_save 4"), rank(1).event("unlink", "save 4", path="latest.tmp")),
      ["save 4: latest.tmp by ranks 0, 1 (rank 0 writes it at train.py:30 in save(); rank 1 deletes it)"],
      id="a-writer-and-a-peer-deleting"),
])
def test_two_ranks_on_one_path_in_one_save_are_a_conflict(ranks, found):
    assert [str(c) for c in conflicts(run(*ranks))] == found
    judged = judge_single_writer("golden", run(*ranks), None)
    assert judged.verdict is Verdict.FAIL and judged.summary.startswith(found[0]), judged.summary


@pytest.mark.parametrize("ranks", [
    P((opened(rank(0), "step_4/model.pt"), opened(rank(1), "step_4/rng_rank1.pt")), id="each-rank-its-own-file"),
    P((rank(0).event("mkdir", "save 4", path="step_4"), rank(1).event("mkdir", "save 4", path="step_4")),
      id="every-rank-makes-the-directory"),
    P((opened(rank(0), "step_4/model.pt", phase="save 4"), opened(rank(1), "step_4/model.pt", phase="save 6")),
      id="one-path-in-two-saves"),
    P((opened(rank(0), "log.txt", phase="train_step 3"), opened(rank(1), "log.txt", phase="train_step 3")),
      id="outside-any-save"),
    P((opened(opened(rank(0), "step_4/model.pt"), "step_4/model.pt"), rank(1)), id="one-rank-twice"),
])
def test_one_writer_per_path_and_save_passes(ranks):
    assert conflicts(run(*ranks)) == []
    assert judge_single_writer("golden", run(*ranks), None).verdict is Verdict.PASS
