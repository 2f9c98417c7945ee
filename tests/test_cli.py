"""The `ckpt-harness` command as a user runs it: a real process, real exit codes."""

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def cli(*args, cwd, env_extra=None, timeout=240):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "ckpt_harness.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout,
    )


def test_list_names_jobs_fault_kinds_and_properties(tmp_path):
    out = cli("list", cwd=tmp_path)
    assert out.returncode == 0
    sections, current = {}, None
    for line in out.stdout.splitlines():
        if not line.startswith(" "):
            current = sections.setdefault(line.rstrip(":"), [])
        else:
            current.append(line.split()[0])
    assert sections["jobs"] == [
        "dcp", "deepspeed", "deepspeed_zero0", "deepspeed_zero2", "deepspeed_zero3", "hf_trainer", "torch_save",
    ]
    assert {"crash", "torn", "power-loss", "enospc"} <= set(sections["fault kinds"])
    assert sections["properties"] == ["atomic", "durable", "preserving", "live", "detecting", "faithful", "skew-safe"]


def test_run_prints_the_verdict_table_and_exits_zero(tmp_path):
    out = cli("run", "--job", "dcp", "--world-size", "2", "--steps", "4", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ckpt_harness verify: job dcp, world size 2" in out.stdout
    assert "resume@4  final state       PASS" in out.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written where it was not asked to


def test_broken_job_from_outside_the_package_exits_nonzero_naming_the_key(tmp_path):
    out = cli("run", "--job", "tests.jobs:NoSchedulerState", "--steps", "4", cwd=tmp_path,
              env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 1
    assert "FAIL" in out.stdout and "scheduler/" in out.stdout
    repro = next(line for line in out.stdout.splitlines() if line.startswith("repro: "))
    assert repro.startswith(f"repro: PYTHONPATH={ROOT} ckpt-harness run --job tests.jobs:NoSchedulerState")

    # The repro line replays exactly that case, and fails the same way.
    args = shlex.split(repro.removeprefix("repro: "))
    env = {args[0].partition("=")[0]: args[0].partition("=")[2]}
    again = cli(*args[2:], cwd=tmp_path, env_extra=env)
    assert again.returncode == 1
    table = again.stdout.split("\n\n")[0].splitlines()[3:]  # title, header, rule
    cases = {line.split()[0] for line in table}
    assert cases == {"golden", "resume@2"}
    assert "scheduler/" in again.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--job", "nope"], "unknown job 'nope'"),
        (["--job", "nowhere.mod:Job"], "cannot import 'nowhere.mod'"),
        (["--job", "dcp", "--world-size", "0"], "world size must be between 1 and 8, got 0"),
        (["--job", "dcp", "--world-size", "9"], "world size must be between 1 and 8, got 9"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, args, message):
    out = cli("run", *args, cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr
