"""Where a save is found for a conversion, and how a checkpoint no built-in
job wrote is read: key for key, a key's type kept, so that a conversion
that turns int keys into strings differs (and is said to)."""

import io

import pytest
import torch

from ckpt_harness import conversions
from ckpt_harness.conversions import _layouts
from ckpt_harness.conversions.run import Converted
from ckpt_harness.oracle.conversions import judge_conversion
from ckpt_harness.state import capture
from ckpt_harness.verdict import Verdict


def test_save_k_is_the_one_directory_named_by_its_step(tmp_path):
    for name in ("step_000002", "step_000004", "checkpoint-40", "latest4"):
        (tmp_path / name).mkdir() if name != "latest4" else (tmp_path / name).write_text("4")
    assert conversions.save_dir(tmp_path, 4) == tmp_path / "step_000004"
    assert conversions.save_dir(tmp_path, 40) == tmp_path / "checkpoint-40"
    with pytest.raises(LookupError, match="no directory .* named by step 6 .*holds checkpoint-40, latest4"):
        conversions.save_dir(tmp_path, 6)
    (tmp_path / "tmp-checkpoint-4").mkdir()
    with pytest.raises(LookupError, match=r"2 directories \(step_000004, tmp-checkpoint-4\)"):
        conversions.save_dir(tmp_path, 4)


def test_a_plain_checkpoint_is_read_key_for_key_keeping_a_keys_type():
    moment = torch.ones(2)
    optim = {"state": {0: {"momentum_buffer": moment}}, "param_groups": [{"lr": 0.1, "params": [0]}]}
    assert _layouts.plain({"optimizer": optim, "extra": io.BytesIO(b"x")}) == {
        "optimizer/state/int:0/momentum_buffer": moment, "optimizer/param_groups/[0]/lr": 0.1,
        "optimizer/param_groups/[0]/params": [0], "extra": b"x"}
    # A script's files are not a built-in job's: read plain, not refused.
    assert _layouts.torch_save_files({"state": optim}, "here") == _layouts.plain({"state": optim})


def judged(saved, read):
    return judge_conversion("c", "convertible", 4, capture(_layouts.plain(saved)),
                            Converted(state=capture(_layouts.plain(read))), writes="w", drops=(), why_dropped="",
                            repro=None)


def test_keys_that_only_changed_type_are_said_so_and_an_equal_read_passes():
    saved = {"state": {0: {"m": torch.ones(2)}, 1: {"m": torch.zeros(2)}}}
    retyped = {"state": {"0": {"m": torch.ones(2)}, "1": {"m": torch.zeros(2)}}}
    result = judged(saved, retyped)
    assert result.verdict is Verdict.FAIL
    assert "2 keys changed type: saved as state/int:0/m, read back as state/0/m (and 1 more)" in result.summary
    assert judged(saved, saved).verdict is Verdict.PASS
    other = judged(saved, {"state": {0: {"m": torch.ones(2)}}})
    assert other.verdict is Verdict.FAIL and "state/int:1/m: missing" in other.summary
