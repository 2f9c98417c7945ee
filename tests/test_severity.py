"""Severity by what differs (issue 44 item 2), through the CLI: a resume that
lost only its RNG state and one that lost its optimizer state both FAIL
`faithful`; the headline says which, the matrix cell says which, and
`matrix --fail-on SEVERITY` lets through what is below it.

`NoPythonRngState` (tests/planted/jobs.py) forgets Python's RNG state, which
its training never draws from: RNG state only. `NoRngState` forgets every
RNG: the data its resume draws differs, and so do the weights it trains.
`NoOptimizerState` forgets the optimizer's: missing keys. One matrix run
each; `--resume` of a whole matrix runs nothing and gates it again with
another `--fail-on`.
"""

import json

import pytest

from tests.clirun import cli

PLANTED = "tests.planted.jobs"


@pytest.fixture(scope="module")
def matrices(tmp_path_factory):
    out = tmp_path_factory.mktemp("severity")
    for job in ("NoPythonRngState", "NoRngState", "NoOptimizerState"):
        done = cli("matrix", "--job", f"{PLANTED}:{job}", "--scenarios", "resume-every-save", "--out", job,
                   "--quiet", cwd=out)
        assert done.returncode == 0, done.stdout + done.stderr  # the default --fail-on: unknown,error
    return out


@pytest.mark.parametrize("job, severity, label", [
    ("NoPythonRngState", "rng", "RNG state only"),
    ("NoRngState", "values", "model or optimizer values"),
    ("NoOptimizerState", "missing", "missing keys"),
])
def test_a_failing_cell_says_how_bad_its_state_differences_are(matrices, job, severity, label):
    data = json.loads((matrices / job / "matrix.json").read_text())
    (faithful,) = [c for c in data["cells"] if c["property"] == "faithful"]
    assert faithful["verdict"] == "fail" and faithful["severity"] == severity, faithful
    assert "differs (" in faithful["reason"], faithful["reason"]  # the headline of its first failure says its own
    assert f"### {PLANTED}:{job} · faithful: fail ({label})" in (matrices / job / "matrix.md").read_text()


@pytest.mark.parametrize("fail_on, job, code", [
    ("values", "NoPythonRngState", 0),   # RNG state only is below values: let through
    ("rng", "NoPythonRngState", 1),      # the least severity: every failing comparison counts
    ("fail", "NoPythonRngState", 1),     # no severity: every FAIL, as before
    ("values", "NoRngState", 1),        # diverged weights are values
    ("values", "NoOptimizerState", 1),  # missing keys are above values
])
def test_fail_on_a_severity_lets_through_only_what_is_below_it(matrices, tmp_path, fail_on, job, code):
    done = cli("matrix", "--resume", str(matrices / job), "--out", "out", "--fail-on", fail_on, "--quiet",
               cwd=tmp_path)
    assert done.returncode == code, done.stdout + done.stderr
    if code:
        assert f"--fail-on {fail_on}: 1 cell ({PLANTED}:{job} · faithful: fail" in done.stderr, done.stderr


def test_a_bad_fail_on_names_the_severities(tmp_path):
    done = cli("matrix", "--fail-on", "bad", cwd=tmp_path)
    assert done.returncode == 2
    assert "rng, data, counters, values, missing" in done.stderr, done.stderr
