"""A separate, pip-installed package extends the harness only through entry points
(`ckpt_harness.checks`, `ckpt_harness.jobs`): the CLI finds its check and its job,
and `matrix` runs them in real process groups. No mocks: a real install, real runs."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

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


def cli(*args, cwd, pythonpath=None, bin_dir=None):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(map(str, pythonpath))
    if bin_dir:
        env["PATH"] = os.pathsep.join([str(bin_dir), env["PATH"]])
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


@pytest.mark.slow
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


# -- a kind of target of the extension's own: `module:function` under torchrun ----------------
TRAIN = "tests.planted.trainers:train"
FORGETS = "tests.planted.trainers:train_without_optimizer"


def test_a_target_kind_from_a_package_is_verified_and_explored_through_the_cli(tmp_path, target):
    """`--callable` comes from the extension's `TargetKind` (entry point
    ``ckpt_harness.targets``): no pipeline knows it. The correct function
    resumes bitwise; its twin that forgets the optimizer is flagged, by
    verify and by an exploration of its save, with repro lines in its own
    options, and as a matrix row. One worker each: what is tested is the
    kind's way through the CLI, which a second worker would only pay for (a
    fresh interpreter)."""
    path = [target, ROOT]
    good = cli("run", "--callable", TRAIN, "--nproc-per-node", "1", "--case", "resume@2", cwd=tmp_path,
               pythonpath=path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "ckpt_harness verify: callable tests.planted.trainers:train, world size 1" in good.stdout
    assert "saves after resume  PASS" in good.stdout

    bad = cli("explore", "--callable", FORGETS, "--nproc-per-node", "1", "--faults", "crash",
              "--ops", "rename", "--corruptions", "", "--no-after", cwd=tmp_path, pythonpath=path)
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "save 4 broken (the callable saved at steps 2, 4)" in bad.stdout
    repro = next(line for line in bad.stdout.splitlines() if line.startswith("repro: "))
    assert shlex.split(repro)[2:6] == ["explore", "--callable", FORGETS, "--faults"], repro

    without = cli("run", "--callable", TRAIN, cwd=tmp_path, pythonpath=[ROOT])
    assert without.returncode == 2 and "unrecognized arguments: --callable" in without.stderr

    # a matrix row of its own kind, kept in matrix.json as its kind and settings (what --resume makes again)
    matrix = cli("matrix", "--callable", TRAIN, "--nproc-per-node", "1", "--scenarios", "power-loss-after-save",
                 "--out", str(tmp_path / "m"), "--quiet", cwd=tmp_path, pythonpath=path)
    assert matrix.returncode == 0, matrix.stdout + matrix.stderr  # a finding is a result: every cell judged
    data = json.loads((tmp_path / "m" / "matrix.json").read_text())
    assert data["jobs"] == [TRAIN] and data["rows"][TRAIN]["kind"] == "callable", data["rows"]
    assert [(c["property"], c["verdict"]) for c in data["cells"]] == [("durable", "fail")], data["cells"]
    assert "the checkpoint directory was never fsynced" in data["cells"][0]["reason"]
    assert "| callable | durable |" in (tmp_path / "m" / "matrix.md").read_text()


@pytest.mark.slow
def test_a_target_kind_from_a_package_runs_through_the_plugin(pytester, target):
    """The ``ckpt`` fixture takes a target of any kind, ready made; the
    plugin is loaded by its entry point, as users meet it."""
    pytester.makepyfile(f"""
        from ckpt_example_target import CallableConfig, CallableTarget

        def verified(ckpt, function):
            # one worker: the fixture's route is what is tested (the CLI test runs two)
            target = CallableTarget.of(CallableConfig(callable=function, nproc_per_node=1))
            return ckpt.verify(target, cases=["resume@2"])

        def test_correct(ckpt):
            verified(ckpt, {TRAIN!r}).assert_ok()

        def test_forgets_the_optimizer(ckpt):
            report = verified(ckpt, {FORGETS!r})
            assert not report.ok
            assert [r.check for r in report.failures()] == ["saves after resume", "final state"], report.explain()
    """)
    # In-process, as the plugin's own tests run (tests/test_plugin.py); the torchrun workers find the
    # package through PYTHONPATH, the inner run through its sys.path.
    env = {"PYTHONPATH": os.pathsep.join(map(str, [target, ROOT])), "HF_HUB_OFFLINE": "1"}
    with pytest.MonkeyPatch.context() as mp:
        for name, value in env.items():
            mp.setenv(name, value)
        mp.syspath_prepend(str(target))
        result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


# -- a console script with a YAML config, as `llamafactory-cli train config.yaml` is run -----------

def test_a_console_script_reading_a_yaml_config_is_verified_like_a_plain_script(tmp_path, target):
    """``ckpt-example-train`` is installed on PATH by the package (its
    `[project.scripts]`); its checkpoint directory is in the YAML file the
    command names, where the harness puts each run's own (a copy in the run
    directory, the user's file left as it was). Run as a file, as the shell
    runs it: explored as any file is (a module's run is explored in
    tests/test_script_launch.py)."""
    config = tmp_path / "train.yaml"
    config.write_text("output_dir: {ckpt_dir}\nmax_steps: 4\nsave_steps: 2\n")
    command = f"ckpt-example-train train {config}"
    common = dict(cwd=tmp_path, pythonpath=[target, ROOT], bin_dir=target / "bin")
    # one worker: how the command is started and given its config is what is tested, not its group
    verified = cli("run", "--script", command, "--nproc-per-node", "1", "--case", "resume@2",
                   "--workdir", str(tmp_path / "runs"), **common)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "saves after resume  PASS" in verified.stdout, verified.stdout
    # Each run got a copy with its checkpoint directory in place: the golden run's; the stopped and the resumed
    # run's, which share one.
    runs = tmp_path / "runs"
    copies = {c.parent.parent.relative_to(runs).as_posix(): yaml.safe_load(c.read_text())["output_dir"]
              for c in runs.glob("**/configs/train.yaml")}
    assert copies == {"golden/run": str(runs / "golden" / "ckpt"), "resume@2/stop": str(runs / "resume@2" / "ckpt"),
                      "resume@2/resume": str(runs / "resume@2" / "ckpt")}, copies
    assert config.read_text().startswith("output_dir: {ckpt_dir}")


def test_a_target_kind_from_a_package_is_a_pytest_option(pytester, target):
    """`--ckpt-callable` comes from the extension's `TargetKind` as the CLI's `--callable` does (the
    plugin loaded by its entry point, in a fresh interpreter): its verification is the item
    ``ckpt-callable::verify``, `--ckpt-scenarios` adds the catalogue against it, and the function that
    forgets the optimizer fails it. Without the package, pytest knows no such option."""
    pytester.makepyfile("def test_nothing(): pass")
    common = ("--ckpt-nproc-per-node", "1", "-p", "no:cacheprovider")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PYTHONPATH", os.pathsep.join(map(str, [target, ROOT])))
        mp.setenv("HF_HUB_OFFLINE", "1")
        listed = pytester.runpytest_subprocess("--ckpt-callable", FORGETS, "--ckpt-scenarios",
                                               "power-loss-after-save", "--collect-only", "-q", *common)
        assert listed.ret == 0, listed.stdout.str() + listed.stderr.str()
        ids = [line for line in listed.stdout.lines if line.startswith("ckpt-")]
        assert ids == ["ckpt-callable::verify", "ckpt-callable::power-loss-after-save"], listed.stdout.str()

        verdicts = {}
        for function in (TRAIN, FORGETS):
            ran = pytester.runpytest_subprocess("ckpt-callable::verify", "--ckpt-callable", function, "-rf", *common)
            verdicts[function] = ran.parseoutcomes()
            assert "test_nothing" not in ran.stdout.str()  # the node id narrowed the run to the item
        assert verdicts == {TRAIN: {"passed": 1}, FORGETS: {"failed": 1}}, verdicts
        ran.stdout.fnmatch_lines(["*saves after resume*FAIL*"])

        mp.setenv("PYTHONPATH", str(ROOT))
        without = pytester.runpytest_subprocess("--ckpt-callable", TRAIN, *common)
    assert without.ret == pytest.ExitCode.USAGE_ERROR
    assert "unrecognized arguments: --ckpt-callable" in without.stderr.str()
