"""A matrix's rows are targets (issue 47): each kept in matrix.json as its kind
and every setting that made it (`targets.TargetSpec`), and made again on
`--resume` through the chooser every surface uses (`targets.rebuild`).

Before, a script row was kept as its command alone, so a resumed script
matrix ran its missing scenarios without `--script-args`,
`--checkpoint-layout`, `--keeps-best` and `--resume-args`: a rotation the
script had been told how to make was n/a, a conversion it had been given a
layout for was n/a. Here the resumed matrix must be the uninterrupted one.
"""

import json
from pathlib import Path

import pytest

from ckpt_harness import targets
from ckpt_harness.errors import UsageError
from tests.clirun import cli

RESUMABLE = Path(__file__).resolve().parent / "scripts" / "resumable.py"
SCRIPT = f"{RESUMABLE} {{ckpt_dir}} --staging --steps 8 --save-every 2"
#: Two scenarios that each need a setting only the row carries: a rotation it is told how to make, a layout.
MATRIX = ("matrix", "--script", SCRIPT, "--nproc-per-node", "1", "--script-args", "keep_last=--keep-last {}",
          "--checkpoint-layout", "torch_save", "--scenarios", "retention-order,convert-last-save", "--quiet")


def _judged(path: Path) -> tuple[list, list, dict]:
    data = json.loads((path / "matrix.json").read_text())
    cells = [(c["job"], c["property"], c["verdict"], c["reason"]) for c in data["cells"]]
    results = [(r["job"], r["scenario"], r["verdict"], r["reason"], r["cases"]) for r in data["scenarios"]]
    return cells, results, data["rows"]


def test_a_script_matrix_stopped_and_resumed_is_the_uninterrupted_one(tmp_path):
    whole = cli(*MATRIX, "--out", str(tmp_path / "whole"), cwd=tmp_path)
    assert whole.returncode in (0, 1), whole.stdout + whole.stderr
    cells, results, rows = _judged(tmp_path / "whole")
    assert [c[2] for c in cells] != ["n/a", "n/a"], cells  # each scenario judged the row with its setting
    (spec,) = rows.values()
    assert spec["kind"] == "script" and spec["settings"]["script_args"] == ["keep_last=--keep-last {}"]
    assert spec["settings"]["checkpoint_layout"] == "torch_save" and spec["settings"]["nproc_per_node"] == 1

    # the matrix as SIGINT leaves one after its first scenario (tests/test_matrix_shards.py sends the signal)
    (tmp_path / "stopped").mkdir()
    data = json.loads((tmp_path / "whole" / "matrix.json").read_text())
    data["scenarios"], data["stopped_by"] = data["scenarios"][:1], "SIGINT"
    (tmp_path / "stopped" / "matrix.json").write_text(json.dumps(data))
    resumed = cli("matrix", "--resume", str(tmp_path / "stopped"), "--out", str(tmp_path / "resumed"), "--quiet",
                  cwd=tmp_path)
    assert resumed.returncode == whole.returncode, resumed.stdout + resumed.stderr
    assert _judged(tmp_path / "resumed") == (cells, results, rows)


def test_a_row_kept_as_data_is_made_again_through_the_one_chooser():
    """Every setting of a row survives its JSON, a job's axes with it; settings that pick another kind are
    refused, as on the command line."""
    for target in (targets.job("dcp[bf16]", world_size=3, timeout=30.0),
                   targets.script(SCRIPT, script_args=("keep_last=--keep-last {}",), resume_args="--init-from resume",
                                  keeps_best=True, cold_start=True)):
        spec = targets.TargetSpec.from_json(json.loads(json.dumps(targets.spec(target).to_json())))
        assert targets.rebuild(spec) == target
    with pytest.raises(UsageError, match=r"a job row whose settings pick a script \(--script\)"):
        targets.rebuild(targets.TargetSpec("job", {"script": SCRIPT}))
