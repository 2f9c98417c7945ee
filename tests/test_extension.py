"""A separate, pip-installed package extends the harness only through entry points
(`ckpt_harness.catalogue.checks`, `ckpt_harness.jobs`): the CLI finds its check and its job,
and `matrix` runs them in real process groups. No mocks: a real install, real runs."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
EXTENSION = ROOT / "tests" / "extension"
UNSEEDED = "tests.planted.jobs:Unseeded"


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """The extension pip-installed into a directory of its own (built from a copy,
    so the build leaves nothing in the repository)."""
    source = tmp_path_factory.mktemp("src") / "extension"
    shutil.copytree(EXTENSION, source)
    target = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-deps", "--no-build-isolation",
                    "--quiet", "--target", str(target), str(source)], check=True, timeout=300)
    return target


def cli(*args, cwd, pythonpath=None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    return subprocess.run([sys.executable, "-m", "ckpt_harness.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=300)


def sections(listing):
    found, current = {}, None
    for line in listing.splitlines():
        if not line.startswith(" "):
            current = found.setdefault(line.rstrip(":"), [])
        else:
            current.append(line.split()[0])
    return found


def test_list_shows_the_check_and_job_only_when_the_package_is_installed(tmp_path, target):
    installed = cli("list", cwd=tmp_path, pythonpath=[target, ROOT])
    assert installed.returncode == 0, installed.stdout + installed.stderr
    found = sections(installed.stdout)
    assert "rerun" in found["checks"] and "example_job" in found["jobs"]
    assert "ckpt_example_extension:RERUN" in installed.stdout
    assert found["checks"][:5] == ["resume", "faults", "overwrite", "reshard", "stall"]  # built-ins come first

    bare = cli("list", cwd=tmp_path, pythonpath=[ROOT])
    assert bare.returncode == 0, bare.stdout + bare.stderr
    found = sections(bare.stdout)
    assert "rerun" not in found["checks"] and "example_job" not in found["jobs"]


def test_matrix_runs_the_extension_check_on_the_extension_job(tmp_path, target):
    path = [target, ROOT]
    out = cli("matrix", "--job", "example_job", "--job", UNSEEDED, "--file", str(EXTENSION / "scenarios"),
              "--out", "out", "--quiet", cwd=tmp_path, pythonpath=path)
    assert out.returncode == 0, out.stdout + out.stderr  # findings are results, not errors
    md = (tmp_path / "out" / "matrix.md").read_text()
    assert "| job | faithful |" in md
    assert "| example_job | ✅ pass |" in md
    assert f"| {UNSEEDED} | ❌ fail |" in md

    data = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert data["complete"]
    cells = {c["job"]: c for c in data["cells"]}
    assert cells["example_job"]["verdict"] == "pass"
    failing = cells[UNSEEDED]
    assert failing["verdict"] == "fail" and failing["scenarios"] == ["rerun-twice"]
    assert failing["property"] == "faithful"
    assert "rerun-twice: " in failing["reason"] and "final state of a second identical run differs" in failing["reason"]
    assert failing["repro"] in md
    assert sorted(os.listdir(tmp_path)) == ["out"]

    # The repro line replays the cell. It names the job's location; the check
    # comes from the installed extension, so that stays on the path.
    env, _, command = failing["repro"].partition(" ")
    assert env == f"PYTHONPATH={ROOT}"
    args = shlex.split(command)
    assert args[:4] == ["ckpt-harness", "scenario", "rerun-twice", "--job"] and "--file" in args
    replay = cli(*args[1:], cwd=tmp_path, pythonpath=[target, env.partition("=")[2]])
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert f"rerun-twice [{UNSEEDED}] faithful: FAIL" in replay.stdout


def test_a_check_no_package_provides_is_a_usage_error(tmp_path, target):
    scenarios = tmp_path / "missing.toml"
    scenarios.write_text('[needs-absent]\nproperty = "faithful"\ncheck = "absent"\ndescription = "no such check"\n')
    for path, listed in (([target, ROOT], True), ([ROOT], False)):
        out = cli("matrix", "--job", "torch_save", "--file", str(scenarios), "--quiet", cwd=tmp_path,
                  pythonpath=path)
        assert out.returncode == 2, out.stdout + out.stderr
        assert "unknown check 'absent'; choose from resume, faults, overwrite, reshard, stall" in out.stderr
        assert ("rerun" in out.stderr) is listed
        assert not (tmp_path / "ckpt-matrix").exists()
