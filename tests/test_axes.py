"""The axes a built-in job trains along (issue 45, item 5): precision,
optimizer, data and torch.compile, each a setting declared once
(`ckpt_harness.job.axes`, `config.SETTINGS`) and a matrix row's bracket
(``torch_save[fp16,sgd]``).

Both ways, through the CLI: a planted job that leaves its loss scaler out
of the checkpoint, and one that resumes its shuffled sampler without the
sampler's generator, are flagged; the built-in job on the same axis passes.
"""

import json
import os
import time
from pathlib import Path

import pytest

from ckpt_harness.job import axes
from ckpt_harness.catalogue.scenario_files import parse
from ckpt_harness.config import SETTINGS, RunConfig, cli_args, settings_of
from ckpt_harness.errors import ConfigError, ScenarioError
from ckpt_harness.jobref import resolve
from tests.clirun import cli

PLANTED = "tests.planted.jobs:"


def test_a_row_names_its_axes_by_their_values():
    assert axes.split_row("dcp") == ("dcp", {})
    assert axes.split_row("torch_save[fp16,adagrad]") == ("torch_save", {"precision": "fp16", "optimizer": "adagrad"})
    assert axes.split_row("dcp[compile, data=workers]") == ("dcp", {"compile": True, "data": "workers"})
    assert axes.split_row("dcp[]") == ("dcp", {})
    row = axes.Axes(precision="bf16", compile=True)
    assert axes.row_name("dcp", row) == "dcp[bf16,compile]"
    assert axes.split_row(axes.row_name("dcp", row))[1] == row.varied()
    assert axes.row_name("dcp", axes.Axes()) == "dcp"


@pytest.mark.parametrize("row, says", [
    ("dcp[fp61]", "'fp61' is no axis value (did you mean 'fp16'?)"),
    ("dcp[bf16,fp16]", "gives precision twice (bf16, fp16)"),
    ("dcp[precison=bf16]", "no axis 'precison' (did you mean 'precision'?)"),
    ("dcp[data=disk]", "data takes stream, workers, shuffled, got 'disk'"),
    ("dcp[bf16", "write a job and its axes as JOB[VALUE,...]"),
])
def test_a_row_with_a_value_no_axis_has_is_refused_saying_what_to_write(row, says):
    with pytest.raises(ConfigError, match=None) as info:
        axes.split_row(row)
    assert says in str(info.value), str(info.value)


def test_each_surface_takes_an_axis_from_its_one_declaration():
    ref, _ = resolve("torch_save")
    config = RunConfig.build(ref, precision="bf16", optimizer="sgd")  # the marker's and the Python API's path
    assert config.axes == axes.Axes(precision="bf16", optimizer="sgd")
    assert cli_args(config.values, settings_of(RunConfig)) == ["--precision", "bf16", "--optimizer", "sgd"]
    with pytest.raises(ConfigError, match="precision must be one of fp32, bf16, fp16, got 'fp8'"):
        RunConfig.build(ref, precision="fp8")
    scenario = parse("fp16-resume", {"property": "faithful", "check": "resume", "description": "d",
                                     "precision": "fp16", "data": "workers"})
    assert (scenario.params["precision"], scenario.params["data"]) == ("fp16", "workers")
    with pytest.raises(ScenarioError, match="data must be one of stream, workers, shuffled"):
        parse("bad", {"property": "faithful", "check": "resume", "description": "d", "data": "disk"})
    assert all(SETTINGS[name].replayed for name in axes.NAMES)


def test_a_job_is_refused_an_axis_value_it_does_not_train_with_before_anything_starts(tmp_path):
    refused = cli("matrix", "--job", "torch_save[sgd]", "--job", "deepspeed_zero0[fp16]",
                  "--scenarios", "resume-every-save", "--out", str(tmp_path / "m"), cwd=tmp_path)
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "job deepspeed_zero0 does not train with precision=fp16: it takes fp32, bf16 (Job.axes)" \
        in refused.stderr, refused.stderr
    assert not (tmp_path / "m" / "matrix.json").exists()


def test_a_loss_scaler_left_out_of_the_checkpoint_is_flagged_and_the_builtin_job_passes(tmp_path):
    def run(job: str):
        return cli("run", "--job", job, "--precision", "fp16", "--steps", "4", "--workdir",
                   str(tmp_path / job.rpartition(":")[2]), cwd=tmp_path)

    forgets = run(PLANTED + "ForgetsTheScaler")
    assert forgets.returncode == 1, forgets.stdout + forgets.stderr
    assert "scaler/scale: 65536.0, expected 131072.0" in forgets.stdout, forgets.stdout
    assert "--precision fp16" in forgets.stdout  # the repro line trains as the run did
    twin = run("torch_save")
    assert twin.returncode == 0, twin.stdout


def test_a_shuffled_sampler_resumed_without_its_generator_is_flagged_and_the_builtin_job_passes(tmp_path):
    def run(job: str):
        where = tmp_path / job.rpartition(":")[2]
        done = cli("run", "--job", job, "--data", "shuffled", "--workdir", str(where), "--json",
                   str(where / "report.json"), cwd=tmp_path)
        cases = json.loads((where / "report.json").read_text())["cases"]
        return done, {c["case"] for c in cases if c["verdict"] == "fail"}

    replays, failed = run(PLANTED + "ReplaysThePermutation")
    assert replays.returncode == 1, replays.stdout + replays.stderr
    # position 6 is in the second epoch, whose permutation a fresh generator does not draw; 2 and 4 are in the first
    assert failed == {"resume@6"}, replays.stdout
    twin, failed = run("torch_save")
    assert twin.returncode == 0 and not failed, twin.stdout


def _stray_group_members(since: float) -> list[int]:
    """Processes of this test started after `since` (seconds since boot)
    whose process group's leader is gone: a rank's loader worker outliving
    its rank (a rank leads its own group; its workers are forked into it)."""
    stray = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()
        except OSError:
            continue
        state, pgid, started = fields[0], int(fields[2]), int(fields[19]) / os.sysconf("SC_CLK_TCK")
        if state != "Z" and started >= since and pgid != int(pid) and not os.path.exists(f"/proc/{pgid}") \
                and _ours(pid):
            stray.append(int(pid))
    return stray


def _ours(pid: str) -> bool:
    """Forked from this process's fork server (its command line names this process), so that other tests'
    processes, which a loaded machine runs side by side, do not count."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return b"ckpt_harness.launch.zygote" in argv and str(os.getpid()).encode() in argv


def _uptime() -> float:
    return float(Path("/proc/uptime").read_text().split()[0])


def test_a_matrix_row_with_axes_trains_along_them_and_leaves_no_loader_worker_behind(tmp_path):
    out = tmp_path / "m"
    since = _uptime()
    done = cli("matrix", "--job", "torch_save[workers,adagrad,compile]", "--scenarios", "resume-every-save",
               "--out", str(out), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    matrix = json.loads((out / "matrix.json").read_text())
    assert matrix["jobs"] == ["torch_save[adagrad,workers,compile]"]
    assert [(c["job"], c["verdict"]) for c in matrix["cells"]] == [("torch_save[adagrad,workers,compile]", "pass")]
    (row,) = matrix["rows"].values()  # what --resume makes the row again from
    assert row["kind"] == "job" and row["settings"]["job"] == "torch_save"
    assert (row["settings"]["optimizer"], row["settings"]["data"], row["settings"]["compile"]) == (
        "adagrad", "workers", True)
    deadline = time.monotonic() + 10  # a worker sees its rank gone within 5 s (DataLoader's watchdog)
    while _stray_group_members(since) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _stray_group_members(since)


def test_a_script_is_told_an_axis_through_its_own_arguments_and_a_scenario_setting_one_it_is_not_is_na(tmp_path):
    from ckpt_harness import targets
    from ckpt_harness.targets import NotApplicable

    told = targets.script("train.py {ckpt_dir}", script_args=("precision=--mixed_precision {}", "compile=--compile"))
    argv = told.with_settings({"precision": "bf16", "compile": True}).argv(tmp_path)
    assert set(argv[2:]) == {"--compile", "--mixed_precision", "bf16"} and "--mixed_precision bf16" in " ".join(argv)
    assert "--compile" not in told.with_settings({"compile": False}).argv(tmp_path)
    with pytest.raises(NotApplicable, match="'optimizer=--optim {}'"):
        told.with_settings({"optimizer": "adagrad"})
