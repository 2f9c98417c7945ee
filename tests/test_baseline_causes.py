"""Baselines by cause (issue 44, item 1), through the CLI: a failure is
expected only for the causes the baseline records.

A baseline written on a planted job whose resume forgets the RNG state
(`NoRngState`: every later state differs in its RNG keys) is applied, by a
job pattern, to a twin failing the same scenario for another cause
(`NoOptimizerState`: the optimizer state is lost, and the weights diverge
after it) and to one failing for the same cause (`NoRngStateTwin`). The
first exits 1 naming the cause it observed beside the recorded one; the
second exits 0. The same for a matrix and for `run`'s cases.
"""

import json
import re
from pathlib import Path

import pytest

from tests.clirun import cli

PLANTED = "tests.planted.jobs"


def written(path: Path, job_pattern: str) -> str:
    """The baseline `--write-baseline` wrote, its job names widened to `job_pattern`."""
    text = path.read_text()
    assert "cause = [" in text, text
    return re.sub(r'^job = ".*"$', f'job = "{job_pattern}"', text, flags=re.M)


@pytest.mark.parametrize("command", [
    pytest.param(("matrix", "--scenarios", "resume-every-save", "--out", "m"), marks=pytest.mark.slow),
    ("run",),
])
def test_a_known_failure_for_another_cause_is_new_and_for_the_same_cause_expected(tmp_path, command):
    made = cli(*command, "--job", f"{PLANTED}:NoRngState", "--write-baseline", "rng.toml", cwd=tmp_path)
    assert "wrote rng.toml" in made.stdout, made.stdout + made.stderr
    (tmp_path / "base.toml").write_text(written(tmp_path / "rng.toml", f"{PLANTED}:*"))
    assert "rng values" in (tmp_path / "base.toml").read_text()

    other = cli(*command, "--job", f"{PLANTED}:NoOptimizerState", "--baseline", "base.toml", cwd=tmp_path)
    assert other.returncode == 1, other.stdout + other.stderr
    new = [line for line in other.stdout.splitlines() if line.startswith("  NEW ")]
    assert new and all("for another cause: observed " in line and "optimizer" in line
                       and "the baseline expects it for " in line for line in new), other.stdout
    assert re.search(r"\d+ new failures?, 0 expected", other.stdout), other.stdout

    same = cli(*command, "--job", f"{PLANTED}:NoRngStateTwin", "--baseline", "base.toml", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert re.search(r"no new failure, [1-9]\d* expected, 0 fixed", same.stdout), same.stdout


@pytest.mark.slow
def test_a_script_matrix_row_failing_for_another_cause_is_new(tmp_path):
    """The same for a script matrix: a baseline expecting a script's resume to
    fail for `live` (what a script that never looks for its checkpoint is
    recorded with: its resume refuses to overwrite), applied to one that
    saves no optimizer state (its resume ends elsewhere: `final state · model
    values`), exits 1 naming both causes; the baseline `--write-baseline`
    wrote on the second, against its own matrix (`--resume` of a whole
    matrix gates it again, running nothing), exits 0."""
    script = f"{Path(__file__).parent / 'scripts' / 'resumable.py'} {{ckpt_dir}} --steps 3 --save-every 2 --staging"
    common = ("matrix", "--nproc-per-node", "2", "--scenarios", "resume-every-save", "--quiet")
    (tmp_path / "base.toml").write_text('[[expect]]\njob = "resumable.py *"\nscenario = "resume-every-save"\n'
                                        'verdict = "fail"\nreason = "never looks for its checkpoint"\n'
                                        'cause = ["live"]\n')
    other = cli(*common, "--script", f"{script} --bug forget-optimizer", "--out", "m2", "--baseline", "base.toml",
                "--write-baseline", "optimizer.toml", "--cold-start", cwd=tmp_path)  # it fails: cold at once
    assert other.returncode == 1, other.stdout + other.stderr
    assert re.search(r"  NEW      resumable.py .* · resume-every-save: fail, for another cause: observed final state "
                     r"· model values; the baseline expects it for live \(base.toml:1\)", other.stdout), other.stdout
    cell = json.loads((tmp_path / "m2" / "matrix.json").read_text())["cells"]
    assert [c["baseline"]["label"] for c in cell if c["property"] == "faithful"] == ["NEW"], cell

    (tmp_path / "own.toml").write_text(written(tmp_path / "optimizer.toml", "resumable.py *"))
    same = cli("matrix", "--resume", "m2", "--out", "m3", "--baseline", "own.toml", "--quiet", cwd=tmp_path)
    assert same.returncode == 0, same.stdout + same.stderr
    assert "no new failure, 1 expected, 0 fixed, 0 stale" in same.stdout, same.stdout
