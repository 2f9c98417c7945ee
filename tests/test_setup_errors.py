"""What is not a finding about checkpoints never reads as one.

A job that cannot run, a framework that is not installed, a deadline too
short for the job, or bad input: each is an ERROR, a skip or exit 2 with one
line saying what to change, never a FAIL, and bad input is refused before
torch is imported.
"""

import os
import signal
import subprocess
import sys
import time

import pytest

from ckpt_harness import Verdict
from tests.clirun import cli
from tests.test_cli import ROOT, process

PLANTED = {"PYTHONPATH": str(ROOT)}


# -- B: setup problems are ERROR or skip ---------------------------------------------
def test_a_job_failing_outside_its_saves_is_an_error_not_a_fail(tmp_path):
    out = cli("run", "--job", "tests.planted.jobs:TrainStepFailsOnRank1", "--steps", "4", cwd=tmp_path,
              env_extra=PLANTED)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "golden  live   ERROR" in out.stdout
    assert "rank 1 raised ValueError in train_step 2: NaN loss at step 2" in out.stdout
    assert "FAIL" not in out.stdout


def test_a_fault_free_save_that_hangs_is_still_a_fail(ckpt):
    """The other side: the final save that never returns is the checkpointing's own failure."""
    report = ckpt.verify("tests.planted.jobs:Rank0BarrierInFinalSave", steps=2, timeout=10)
    (live,) = report.results
    assert live.verdict is Verdict.FAIL and "waiting in barrier" in live.summary


def test_a_missing_framework_says_what_to_install_before_starting_anything(tmp_path):
    started = time.monotonic()
    out = process("run", "--job", "tests.planted.jobs:NeedsAbsentFramework", cwd=tmp_path, env_extra=PLANTED)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "ckpt-harness: error: job tests.planted.jobs:NeedsAbsentFramework needs ckpt_harness_absent_framework, "
        "which is not installed here: pip install 'ckpt-harness[absent]'"]
    assert "Traceback" not in out.stderr
    assert time.monotonic() - started < 60  # no group was started (a generous bound: it would hang otherwise)


def test_the_matrix_lists_a_job_it_cannot_run_as_not_run(tmp_path):
    out = cli("matrix", "--job", "torch_save", "--job", "tests.planted.jobs:NeedsAbsentFramework",
              "--scenarios", "resume-every-save", "--out", "out", "--quiet", cwd=tmp_path, env_extra=PLANTED)
    assert out.returncode == 0, out.stdout + out.stderr
    md = (tmp_path / "out" / "matrix.md").read_text()
    assert "Not run: tests.planted.jobs:NeedsAbsentFramework (job tests.planted.jobs:NeedsAbsentFramework needs " \
           "ckpt_harness_absent_framework, which is not installed here: pip install 'ckpt-harness[absent]')" in md
    assert "| tests.planted.jobs:NeedsAbsentFramework |" not in md
    assert "Traceback" not in out.stdout + out.stderr


def test_the_plugin_skips_a_job_whose_framework_is_missing(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    result = pytester.runpytest_inprocess("--ckpt-job", "tests.planted.jobs:NeedsAbsentFramework",
                                           "--ckpt-scenarios", "resume-every-save", "-rs", "-p", "no:cacheprovider")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*pip install 'ckpt-harness[[]absent]'*"])


def test_the_matrix_shows_a_job_that_cannot_run_as_error(tmp_path):
    out = cli("matrix", "--job", "tests.planted.jobs:TrainStepFailsOnRank1", "--scenarios", "resume-every-save",
              "--out", "out", "--quiet", cwd=tmp_path, env_extra=PLANTED)
    cells = __import__("json").loads((tmp_path / "out" / "matrix.json").read_text())["cells"]
    assert {c["verdict"] for c in cells if c["scenarios"]} == {"error"}, out.stdout


# -- F: bad input is refused at once, before torch is imported -------------------------
@pytest.fixture
def no_torch(tmp_path):
    """A PYTHONPATH on which importing torch fails: what is refused here was refused before torch."""
    shadow = tmp_path / "shadow" / "torch"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('torch was imported before the input was checked')\n")
    return {"PYTHONPATH": os.pathsep.join([str(shadow.parent), str(ROOT)])}


@pytest.mark.parametrize("args, message", [
    (["explore", "--job", "torch_save", "--world-size", "0"],
     "argument --world-size: world_size must be between 1 and 8, got 0"),
    (["explore", "--job", "torch_save", "--hang-timeout", "-1"],
     "argument --hang-timeout: hang_timeout must be a positive number of seconds, got -1.0"),
    (["run", "--job", "torch_save", "--timeout", "nan"],
     "argument --timeout: timeout must be a positive number of seconds, got nan"),
    (["run", "--job", "torch_save", "--steps", "many"], "argument --steps: expected an integer, got 'many'"),
    (["trace", "--job", "torch_save", "--save", "3"], "save 3 is not a save step; choose from 2, 4"),
    (["run", "--job", "torch_save", "--steps", "2", "--save-every", "3"], "save_every (3) must not exceed steps (2)"),
    (["explore", "--job", "torch_save", "--world-size", "3", "--nodes", "2"],
     "2 simulated nodes cannot share 3 ranks evenly"),
    (["explore", "--job", "torch_save", "--faults", "crsh"],
     "argument --faults: faults has unknown crsh (did you mean 'crash'?): choose from crash, crash-after"),
    (["run", "--job", "torch_save", "--launcher", "slurm"],
     "argument --launcher: launcher must be one of elastic, plain, got 'slurm'"),
])
def test_bad_settings_exit_2_with_one_line_before_torch(tmp_path, no_torch, args, message):
    out = process(*args, cwd=tmp_path, env_extra=no_torch)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr.splitlines()[0], out.stderr  # the first line, not after the usage text
    assert "Traceback" not in out.stderr and "torch was imported" not in out.stderr
    assert "got ('" not in out.stderr  # a list shown as typed, not as a tuple


def test_a_script_never_told_its_checkpoint_directory_is_bad_input_after_one_run(tmp_path):
    """resumable.py takes its directory as an argument, and the command has no {ckpt_dir}: argparse refuses
    on every rank before any save. Exit 2 naming the placeholder and quoting argparse, from that one run
    (before: ERROR after 22 s, a second run with cold starts to confirm it, the reason in rank0.log alone).
    Its twin reads CKPT_HARNESS_CKPT_DIR, has no placeholder either, and runs."""
    resumable = ROOT / "tests" / "scripts" / "resumable.py"
    out = cli("run", "--script", f"{resumable} --steps 4", "--nproc-per-node", "2", "--workdir", "w", cwd=tmp_path)
    assert out.returncode == 2 and out.stdout == "", out.stdout + out.stderr
    # the heartbeat's lines ("[ckpt_harness] golden/run: running for 10 s ...") come first on a loaded box
    first, *quoted = [line for line in out.stderr.strip().splitlines() if not line.startswith("[ckpt_harness] ")]
    assert first.startswith("ckpt-harness: error: the script exited with status 2 on every rank before its "
                            "first save, and its command has no {ckpt_dir}: it was never told where its "
                            "checkpoints go"), first
    assert "or have it read $CKPT_HARNESS_CKPT_DIR" in first, first
    assert quoted == ["    resumable.py: error: the following arguments are required: out"], out.stderr
    assert [p.name for p in (tmp_path / "w").iterdir() if not p.name.startswith(".")] == ["golden"], \
        "one run, none again cold"
    told = cli("run", "--script", f"{ROOT / 'tests' / 'scripts' / 'env_dir.py'} --steps 2", "--nproc-per-node", "2",
               "--case", "golden", cwd=tmp_path)
    assert told.returncode == 0 and "golden  live   PASS" in told.stdout, told.stdout + told.stderr


def test_a_workdir_that_is_a_file_or_cannot_be_made_is_one_line(tmp_path):
    (tmp_path / "afile").write_text("")
    out = cli("run", "--job", "torch_save", "--workdir", "afile", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "workdir afile is a file; give a new or empty directory" in out.stderr
    out = cli("run", "--job", "torch_save", "--workdir", "afile/sub", cwd=tmp_path)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "cannot create workdir afile/sub" in out.stderr


def test_a_deadline_shorter_than_a_start_is_an_error_naming_the_timeout(tmp_path):
    out = cli("run", "--job", "torch_save", "--timeout", "0.001", cwd=tmp_path)
    assert out.returncode == 3, out.stdout + out.stderr
    assert "Traceback" not in out.stdout + out.stderr
    assert "give it a longer timeout" in out.stdout


def test_ctrl_c_of_explore_is_one_line_and_leaves_no_workdir(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["TMPDIR"] = str(tmp)
    # As a terminal starts it: a suite started in the background inherits SIGINT ignored.
    proc = subprocess.Popen([sys.executable, "-m", "ckpt_harness.cli", "explore", "--job", "torch_save", "--quiet"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 120
        while not list(tmp.glob("ckpt-harness-*/golden/run/rank0.log")):  # well into the work
            assert time.monotonic() < deadline and proc.poll() is None, "explore never started a run"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, err
    assert err.strip() == "ckpt-harness: interrupted", err
    assert not list(tmp.glob("ckpt-harness-*")), "the temporary workdir was left behind"


# -- F: the plugin's options --------------------------------------------------------------
@pytest.mark.parametrize("args, message", [
    (["--ckpt-timeout", "-1"], "--ckpt-timeout: timeout must be a positive number of seconds, got -1.0"),
    (["--ckpt-scenarios", "crash-*"],
     "--ckpt-scenarios names the catalogue's scenarios to run against a target: add --ckpt-job (a registered "
     "job*) or --ckpt-script (a training script*"),
])
def test_bad_plugin_options_are_one_usage_error(pytester, args, message):
    pytester.makepyfile("def test_nothing(): pass")
    result = pytester.runpytest_inprocess(*args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


# -- F: scenario files that name their own jobs; a user's scenarios/ next to the catalogue --
NAMED_JOB = ('[resume-named]\nproperty = "faithful"\ncheck = "resume"\ndescription = "resume from every save"\n'
             'steps = 2\njobs = ["tests.planted.jobs:NoOptimizerState"]\n')


def test_a_scenario_file_naming_a_job_by_module_collects_it(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    pytester.mkdir("scenarios").joinpath("named.toml").write_text(NAMED_JOB)
    result = pytester.runpytest_inprocess("scenarios", "--collect-only", "-q", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*named.toml::resume-named?tests.planted.jobs:NoOptimizerState-ws2?"])


def test_matrix_of_a_file_runs_the_jobs_it_names_and_only_those(tmp_path):
    (tmp_path / "named.toml").write_text(NAMED_JOB)
    out = cli("matrix", "--file", "named.toml", "--out", "out", "--quiet", cwd=tmp_path, env_extra=PLANTED)
    result = __import__("json").loads((tmp_path / "out" / "matrix.json").read_text())
    assert result["jobs"] == ["tests.planted.jobs:NoOptimizerState"], out.stdout + out.stderr
    assert [c["verdict"] for c in result["cells"] if c["scenarios"]] == ["fail"]


def test_a_users_scenarios_directory_does_not_hide_the_catalogue(pytester):
    pytester.mkdir("scenarios").joinpath("mine.toml").write_text(
        '[crash-at-commit]\nproperty = "atomic"\ncheck = "faults"\ndescription = "crash at each rename"\n'
        'faults = ["crash"]\nops = ["rename"]\n')
    result = pytester.runpytest_inprocess("--ckpt-job=torch_save", "--collect-only", "-q", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*mine.toml::crash-at-commit?torch_save-ws2?", "*resume-every-save?torch_save-ws2?"])


def test_every_rank_raising_the_same_error_shows_one_traceback_of_the_jobs_frames(tmp_path):
    """Both ranks raise the same RuntimeError in setup: one traceback, said to
    be both ranks', without the harness's frames between the launcher and
    the job (hidden, as pytest hides `__tracebackhide__` frames)."""
    out = cli("run", "--job", "tests.planted.jobs:ExpectsRotationAndOverwrite", "--case", "golden", cwd=tmp_path,
              env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 3, out.stdout + out.stderr
    assert "ranks 0, 1 (the same traceback) raised RuntimeError in setup" in out.stdout, out.stdout
    assert out.stdout.count("Traceback (most recent call last)") == 1, out.stdout
    assert 'tests/planted/jobs.py", line ' in out.stdout, out.stdout
    assert f"{os.sep}ckpt_harness{os.sep}" not in out.stdout.partition("Traceback")[2].partition("RuntimeError")[0]
