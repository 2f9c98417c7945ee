"""The `ckpt-harness` command: its output and exit codes from `cli.main` in this
process (`tests/clirun.py`), and as a user runs it, a real process, where the
process is what is tested: the console script, stderr a pipe, a repro line's
PYTHONPATH."""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent


def process(*args, cwd, env_extra=None, timeout=240):
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
        "torch_save", "dcp", "dcp_async", "dcp_async_process", "dcp_s3connector", "deepspeed_zero0", "deepspeed",
        "deepspeed_zero2", "deepspeed_zero3", "hf_trainer",
    ]
    assert sections["checks"] == ["resume", "faults", "overwrite", "reshard", "stall", "retention", "convert",
                                  "confuse", "conflicts", "neutral"]
    assert sections["conversions (the convert check; layout: what they read)"] == [
        "dcp-to-torch-save", "dcp-round-trip", "torch-save-to-safetensors", "torch-save-to-dcp", "zero-to-fp32",
        "zero-to-universal", "save-pretrained", "shard-trainer-weights"]
    assert {"crash", "torn", "power-loss", "enospc"} <= set(sections["fault kinds"])
    assert sections["properties"] == ["atomic", "durable", "preserving", "live", "detecting", "faithful", "skew-safe",
                                      "overwrite-safe", "rotation-safe", "reshardable", "safe-loading", "convertible",
                                      "snapshot-consistent", "single-writer", "save-neutral", "upgrade-safe"]
    assert {"crash-every-phase", "overwrite-larger-world", "final-save-blocked", "slow-background-save",
            "final-save-writer-frozen"} <= set(
        sections["scenarios (ckpt-harness scenario NAME, ckpt-harness matrix)"])


def test_run_prints_the_verdict_table_and_exits_zero(tmp_path):
    out = cli("run", "--job", "dcp", "--world-size", "2", "--steps", "4", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "ckpt_harness verify: job dcp, world size 2" in out.stdout
    assert "resume@4  final state       PASS" in out.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written where it was not asked to


def test_broken_job_from_outside_the_package_exits_nonzero_naming_the_key(tmp_path):
    out = process("run", "--job", "tests.planted.jobs:NoSchedulerState", "--steps", "4", cwd=tmp_path,
                  env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 1
    assert "FAIL" in out.stdout and "scheduler/" in out.stdout
    repro = next(line for line in out.stdout.splitlines() if line.startswith("repro: "))
    assert repro.startswith(f"repro: PYTHONPATH={ROOT} ckpt-harness run --job tests.planted.jobs:NoSchedulerState")

    # The repro line replays exactly that case, and fails the same way.
    args = shlex.split(repro.removeprefix("repro: "))
    env = {args[0].partition("=")[0]: args[0].partition("=")[2]}
    again = process(*args[2:], cwd=tmp_path, env_extra=env)
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
        (["--job", "dcp", "--world-size", "0"], "world_size must be between 1 and 8, got 0"),
        (["--job", "dcp", "--world-size", "9"], "world_size must be between 1 and 8, got 9"),
        (["--job", "dcp", "--steps", "4", "--save-every", "6"], "save_every (6) must not exceed steps (4)"),
    ],
)
def test_bad_input_exits_2_with_a_message(tmp_path, args, message):
    out = cli("run", *args, cwd=tmp_path, timeout=120)
    assert out.returncode == 2
    assert message in out.stderr
    assert "Traceback" not in out.stderr


def test_matrix_writes_markdown_and_json_and_its_repro_lines_reproduce(tmp_path):
    import json

    out = cli("matrix", "--job", "torch_save", "--job", "tests.planted.scenario_jobs:MergesIntoExisting",
              "--scenarios", "overwrite-larger-world,world-size-grow", "--out", "out", "--quiet",
              cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr  # findings are results, not errors
    md = (tmp_path / "out" / "matrix.md").read_text()
    assert "| job | overwrite-safe | reshardable |" in md
    assert "| torch_save | ✅ pass | ✅ pass |" in md
    assert "| tests.planted.scenario_jobs:MergesIntoExisting | ❌ fail | ✅ pass |" in md
    data = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert data["complete"] and data["versions"]["torch"] and data["world_size"] == 2
    (failing,) = [c for c in data["cells"] if c["verdict"] == "fail"]
    assert "stale files of the earlier run left in place" in failing["reason"]
    assert failing["repro"] in md
    assert sorted(os.listdir(tmp_path)) == ["out"]  # runs went to a temporary directory, now gone

    env, _, command = failing["repro"].partition(" ")
    replay = cli(*shlex.split(command)[1:], cwd=tmp_path, env_extra=dict([env.split("=", 1)]))
    assert replay.returncode == 1, replay.stdout + replay.stderr
    assert ("overwrite-larger-world [tests.planted.scenario_jobs:MergesIntoExisting] overwrite-safe: FAIL"
            in replay.stdout)
    assert "step_000002/rng_rank2.pt" in replay.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["matrix", "--scenarios", "nope"], "no scenario named nope; choose from"),
        (["matrix", "--job", "torch_save", "--world-size", "0"], "world_size must be"),
        (["matrix", "--job", "nope"], "unknown job 'nope'"),
        (["scenario", "crash-every-phase", "--job", "dcp", "--file", "missing.toml"],
         "missing.toml: no such scenario file"),
    ],
)
def test_bad_matrix_input_exits_2_with_a_message(tmp_path, args, message):
    out = cli(*args, cwd=tmp_path)
    assert out.returncode == 2, out.stdout + out.stderr
    assert message in out.stderr
    assert not (tmp_path / "ckpt-matrix").exists()


def test_scenario_that_does_not_apply_exits_zero_saying_why(tmp_path):
    out = cli("scenario", "world-size-grow", "--job", "tests.planted.checkpointers:ReferenceCheckpointer", cwd=tmp_path,
              env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 0, out.stdout + out.stderr
    assert "reshardable: N/A — the job defines no full_state(ctx)" in out.stdout


def test_help_gives_the_default_each_kind_of_target_really_gets(tmp_path):
    """Script mode's runs get 180 s, a Job's 60 s: --help said 60 for both."""
    out = cli("run", "--help", cwd=tmp_path)
    assert out.returncode == 0
    assert "(default: 60.0; with --script: 180.0)" in " ".join(out.stdout.split()), out.stdout


def test_run_shows_its_progress_unless_quiet(tmp_path):
    """A script's verify took minutes with no line; run now counts its cases
    as explore does (the golden run first, then each resume)."""
    out = cli("run", "--job", "torch_save", "--steps", "4", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if re.match(r"\[\d+/3 cases\] ", line)]
    assert lines[0].startswith("[1/3 cases] ") and lines[-1].startswith("[3/3 cases] ") and "3 pass" in lines[-1]
    quiet = cli("run", "--job", "torch_save", "--steps", "4", "--quiet", cwd=tmp_path)
    assert quiet.returncode == 0 and "cases]" not in quiet.stderr, quiet.stderr


def test_faults_alone_means_those_faults_only(tmp_path):
    """A newcomer's `--faults power-loss` ran every corruption too; now the one
    list given is the whole of what is injected (and likewise --corruptions)."""
    import json

    out = cli("explore", "--job", "torch_save", "--faults", "crash", "--ops", "rename", "--no-after",
              "--json", "faults.json", cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    data = json.loads((tmp_path / "faults.json").read_text())
    assert data["settings"]["corruptions"] == [] and {c["case"].split("@")[0] for c in data["cases"]} == {"crash"}
    out = cli("explore", "--job", "torch_save", "--corruptions", "delete", "--json", "corruptions.json",
              cwd=tmp_path)
    data = json.loads((tmp_path / "corruptions.json").read_text())
    assert data["settings"]["faults"] == [] and all(c["case"].startswith("delete:") for c in data["cases"]), out.stdout


def test_keep_says_what_a_failing_run_leaves_and_none_leaves_nothing(tmp_path):
    import tempfile

    env = {"PYTHONPATH": str(ROOT)}
    args = ("explore", "--job", "tests.planted.checkpointers:DeletesPreviousFirst", "--steps", "4", "--faults",
            "eio", "--ops", "open", "--corruptions", "", "--quiet")
    def made():
        return {p for p in Path(tempfile.gettempdir()).glob("ckpt-harness-*") if p.is_dir()}

    before = made()
    failed = cli(*args, cwd=tmp_path, env_extra=env)
    assert failed.returncode == 1, failed.stdout + failed.stderr
    found = re.search(r"runs, checkpoints and rank logs kept in (\S+): (\d+) MB \(--keep none removes them\)",
                      failed.stdout)
    assert found and Path(found[1]).is_dir() and int(found[2]) > 0, failed.stdout
    cleared = cli(*args, "--keep", "none", cwd=tmp_path, env_extra=env)
    assert cleared.returncode == 1 and "kept in" not in cleared.stdout, cleared.stdout
    assert made() - before == {Path(found[1])}


# -- output a CI can follow and gate on ------------------------------------------------------
def test_explore_off_a_terminal_prints_progress_lines_and_json_matching_the_verdict(tmp_path):
    import json
    import re

    # at its fsyncs only: cases that fail and cases that pass (9 of the 22 at every operation)
    out = process("explore", "--job", "tests.planted.checkpointers:DeletesPreviousFirst", "--steps", "4",
                  "--faults", "eio", "--ops", "fsync", "--corruptions", "", "--json", "out/report.json",
                  "--all-failures", cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)})
    assert out.returncode == 1, out.stdout + out.stderr
    assert "\r" not in out.stderr  # stderr is a pipe here, as in a CI log
    lines = [line for line in out.stderr.splitlines() if re.match(r"\[ *\d+/\d+ cases\] ", line)]
    total = int(lines[0].split("/")[1].split()[0])
    assert lines[0].startswith(f"[{1:>{len(str(total))}}/{total} cases] ")  # the first case
    assert lines[-1].startswith(f"[{total}/{total} cases] ") and " fail" in lines[-1]  # the last, with counts

    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (data["kind"], data["verdict"], data["job"]) == ("explore", "fail",
                                                           "tests.planted.checkpointers:DeletesPreviousFirst")
    assert data["world_size"] == 2 and data["settings"]["steps"] == 4 and data["settings"]["faults"] == ["eio"]
    assert data["versions"]["torch"] and data["elapsed_seconds"] > 0
    assert len(data["cases"]) == total
    counts = {v: sum(c["verdict"] == v for c in data["cases"]) for v in ("pass", "fail")}
    assert f"{total} cases: {counts['pass']} pass, {counts['fail']} fail" in out.stdout
    assert lines[-1].endswith(f"{counts['pass']} pass, {counts['fail']} fail")
    failing = [c for c in data["cases"] if c["verdict"] == "fail"]
    for case in failing:
        assert f"--- {case['case']} / {case['check']}: FAIL — {case['summary']}" in out.stdout
        assert f"repro: {case['repro']}" in out.stdout
        assert case["row"]["fault"] == "eio"


def test_run_and_scenario_write_json_reports(tmp_path):
    import json

    run = cli("run", "--job", "tests.planted.jobs:NoSchedulerState", "--steps", "4", "--json", "run.json",
              cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)})
    assert run.returncode == 1, run.stdout + run.stderr
    data = json.loads((tmp_path / "run.json").read_text())
    assert (data["kind"], data["verdict"], data["world_size"]) == ("verify", "fail", 2)
    assert data["settings"]["steps"] == 4 and data["settings"]["save_every"] == 2  # defaults included
    rows = run.stdout.split("\n\n")[0].splitlines()[3:]  # title, header, rule
    assert [(c["case"], c["check"], c["verdict"].upper()) for c in data["cases"]] == [
        (r[:10].strip(), r[10:28].strip(), r[28:37].strip()) for r in rows]
    failed = [c for c in data["cases"] if c["verdict"] == "fail"]
    assert failed and all("scheduler/" in c["details"] and f"repro: {c['repro']}" in run.stdout for c in failed)

    na = cli("scenario", "world-size-grow", "--job", "tests.planted.checkpointers:ReferenceCheckpointer",
             "--json", "scenario.json", cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)})
    assert na.returncode == 0, na.stdout + na.stderr
    data = json.loads((tmp_path / "scenario.json").read_text())
    assert (data["kind"], data["verdict"], data["note"]) == ("scenario", "n/a", "world-size-grow [reshardable]")
    assert data["settings"] == {"world_size": 2, "timeout": 60.0, "parallel": 2, "launcher": "elastic"}
    (case,) = data["cases"]
    assert case["summary"].startswith("the job defines no full_state(ctx)") and case["summary"] in na.stdout


def test_matrix_fail_on_gates_the_exit_code(tmp_path):
    import json

    def matrix(*fail_on):
        return cli("matrix", "--job", "tests.planted.scenario_jobs:MergesIntoExisting", "--scenarios",
                   "overwrite-larger-world", "--out", "out", *fail_on, cwd=tmp_path,
                   env_extra={"PYTHONPATH": str(ROOT)})

    gated = matrix("--fail-on", "fail,unknown,error")
    assert gated.returncode == 1, gated.stdout + gated.stderr
    assert ("--fail-on fail,unknown,error: 1 cell "
            "(tests.planted.scenario_jobs:MergesIntoExisting · overwrite-safe: fail)"
            in gated.stderr)
    data = json.loads((tmp_path / "out" / "matrix.json").read_text())
    assert (data["kind"], data["verdict"], data["world_size"]) == ("matrix", "fail", 2)
    assert data["settings"] == {"world_size": 2, "timeout": 60.0, "parallel": 2, "launcher": "elastic"}
    assert data["complete"]
    # the default: failing cells are findings to document, an incomplete matrix fails
    assert matrix().returncode == 0

    wrong = cli("matrix", "--fail-on", "pass", cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)})
    assert wrong.returncode == 2 and "give comma-separated verdicts from fail, unknown, error" in wrong.stderr


def test_a_job_module_in_the_current_directory_is_importable(tmp_path):
    """Started as a user starts it (the console script, which unlike `python -m`
    puts nothing of the current directory on sys.path), from the job's own directory."""
    (tmp_path / "mymod.py").write_text(
        "from ckpt_harness.jobs.torch_save import TorchSaveJob\n\n\nclass MyJob(TorchSaveJob):\n    pass\n")
    script = Path(sys.executable).parent / "ckpt-harness"
    command = [str(script)] if script.exists() else [sys.executable, "-P", "-m", "ckpt_harness.cli"]
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([*command, "run", "--job", "mymod:MyJob", "--steps", "2", "--save-every", "2"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "resume@2  final state       PASS" in out.stdout


def test_matrix_with_a_baseline_fails_only_on_a_new_failure(tmp_path):
    """A planted bug fails the build until a baseline expects it; then the run
    passes, showing it as expected with its reason, and a known failure that
    no longer happens is reported for the baseline to be updated."""
    env = {"PYTHONPATH": str(ROOT)}
    merges = "tests.planted.scenario_jobs:MergesIntoExisting"
    matrix = ("matrix", "--scenarios", "overwrite-larger-world", "--out", "out", "--quiet")
    (tmp_path / "empty.toml").write_text("# nothing is known to fail\n")

    new = cli(*matrix, "--job", merges, "--baseline", "empty.toml", "--write-baseline", "expect.toml",
              cwd=tmp_path, env_extra=env)
    assert new.returncode == 1, new.stdout + new.stderr
    assert f"  NEW      {merges} · overwrite-larger-world: fail: 2 of 2 cases fail (overwrite-safe)" in new.stdout
    assert "1 new failure, 0 expected, 0 fixed, 0 stale" in new.stdout
    assert "wrote expect.toml: 1 expected failure; replace each reason with why it is known" in new.stdout

    # The bootstrapped file, its reason edited, plus an entry for a bug torch_save does not have (any more).
    written = (tmp_path / "expect.toml").read_text()
    assert f'job = "{merges}"\nscenario = "overwrite-larger-world"\nverdict = "fail"\nreason = "2 of 2 cases' in written
    edited = re.sub(r'reason = ".*"', 'reason = "keeps the shards of a larger run, issue #12"', written)
    (tmp_path / "expect.toml").write_text(edited + '\n[[expect]]\njob = "torch_save"\nscenario = "overwrite-*"\n'
                                                   'verdict = "fail"\nreason = "issue #7"\n')
    known = cli(*matrix, "--job", "torch_save", "--job", merges, "--baseline", "expect.toml", cwd=tmp_path,
                env_extra=env)
    assert known.returncode == 0, known.stdout + known.stderr
    # the table says what it is, and what the baseline says of it
    assert "| tests.planted.scenario_jobs:MergesIntoExisting | ❌ fail · expected |" in known.stdout
    assert "| torch_save | ✅ pass · fixed |" in known.stdout
    assert (f"  expected {merges} · overwrite-larger-world: fail, expected: keeps the shards of a larger run, "
            "issue #12 (expect.toml:6)") in known.stdout
    assert ("  fixed    torch_save · overwrite-larger-world: pass, the baseline expects fail (expect.toml:13): "
            "fixed, update the baseline") in known.stdout  # line 12: the cause the written entry records
    assert "no new failure, 1 expected, 1 fixed, 0 stale" in known.stdout

    # A matrix.json is a baseline too, for one scenario as for the matrix.
    one = cli("scenario", "overwrite-larger-world", "--job", merges, "--baseline", "out/matrix.json",
              cwd=tmp_path, env_extra=env)
    assert one.returncode == 0, one.stdout + one.stderr
    assert f"overwrite-larger-world [{merges}] overwrite-safe: FAIL" in one.stdout
    assert "(out/matrix.json: scenarios[1])" in one.stdout and "no new failure, 1 expected" in one.stdout


def test_run_and_explore_are_gated_case_by_case_against_a_baseline(tmp_path):
    """A framework's known quirk (here: every rank deleting old checkpoints at the
    end, caught when rank 0 is late) written once as expected; a new failure still
    fails. Cases are named as repro lines name them, patterns allowed."""
    env = {"PYTHONPATH": str(ROOT)}
    explore = ("explore", "--job", "tests.planted.jobs:EveryRankDeletesOldCheckpoints", "--faults", "crash,delay",
               "--ops", "rmtree", "--corruptions", "", "--quiet")
    first = cli(*explore, "--write-baseline", "expect.toml", cwd=tmp_path, env_extra=env)
    assert first.returncode == 1, first.stdout + first.stderr
    written = (tmp_path / "expect.toml").read_text()
    late, crash = "delay@r0:after_save4/rmtree(step_000002)", "crash@r0:after_save4/rmtree(step_000002)"
    job = "tests.planted.jobs:EveryRankDeletesOldCheckpoints"
    assert f'case = "{late}"\nverdict = "fail"\nreason = "skew-safe: delay at rank 0' in written
    known = cli(*explore, "--baseline", "expect.toml", cwd=tmp_path, env_extra=env)
    assert known.returncode == 0, known.stdout + known.stderr
    assert f"expected {job} · {late}: fail" in known.stdout
    assert "no new failure, 1 expected, 0 fixed, 0 stale" in known.stdout

    (tmp_path / "other.toml").write_text('[[expect]]\njob = "tests.planted.*"\ncase = "crash@*"\n'
                                         'verdict = "fail"\nreason = "issue #9"\n')
    new = cli(*explore, "--baseline", "other.toml", cwd=tmp_path, env_extra=env)
    assert new.returncode == 1, new.stdout + new.stderr
    assert f"NEW      {job} · {late}: fail" in new.stdout
    # the crash case passes: the entry is out of date
    assert f"fixed    {job} · {crash}: pass, the baseline expects fail (other.toml:1)" in new.stdout
    assert "1 new failure, 0 expected, 1 fixed, 0 stale" in new.stdout

    (tmp_path / "both.toml").write_text('[[expect]]\njob = "x"\ncase = "c"\nscenario = "s"\n'
                                        'verdict = "fail"\nreason = "r"\n')
    bad = cli("run", "--job", "torch_save", "--baseline", "both.toml", cwd=tmp_path, env_extra=env)
    assert bad.returncode == 2 and "give scenario (matrix, scenario) or case (run, explore), not both" in bad.stderr


@pytest.mark.parametrize("command", [["matrix"], ["scenario", "crash-every-phase", "--job", "dcp"]])
def test_a_bad_baseline_exits_2_before_anything_runs(tmp_path, command):
    (tmp_path / "expect.toml").write_text('[[expect]]\njob = "dcp"\nscenario = "x"\nverdict = "failed"\nreason = "r"\n')
    out = cli(*command, "--baseline", "expect.toml", cwd=tmp_path, env_extra={"PYTHONPATH": str(ROOT)}, timeout=60)
    assert out.returncode == 2, out.stdout + out.stderr
    assert ("ckpt-harness: error: expect.toml:1: verdict 'failed' is not one of fail, error, unknown, pass, n/a"
            in out.stderr)
    assert sorted(os.listdir(tmp_path)) == ["expect.toml"]


@pytest.mark.parametrize("args, said", [
    (("run", "--job", "torch_sav"), "unknown job 'torch_sav' (did you mean 'torch_save'?)"),
    (("matrix", "--scenarios", "crash-every-phse"), "no scenario named crash-every-phse (did you mean "
                                                    "'crash-every-phase'?)"),
    (("run", "--job", "torch_save", "--timout", "3"), "unrecognized arguments: --timout 3 (did you mean "
                                                      "'--timeout'?)"),
    (("explore", "--job", "torch_save", "--faults", "crsh"), "faults has unknown crsh (did you mean 'crash'?)"),
    (("run", "--job", "zzz"), "unknown job 'zzz': use one of"),  # nothing close: no guess
])
def test_a_misspelt_job_scenario_option_or_choice_gets_a_did_you_mean(tmp_path, args, said):
    done = cli(*args, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert said in done.stderr, done.stderr
    assert ("did you mean" in done.stderr) is ("did you mean" in said)


def test_a_signal_ends_explore_within_seconds_not_after_the_cases_in_flight(tmp_path, pace):
    """SIGTERM (as SIGINT, `cli`) ends the command within seconds: the case
    in flight is cut (`launch.cancel`) and none queued starts. Leaving its
    pool of cases as `with` does used to wait for the cases in flight, with
    every run they had left (an explore of OLMo-core went on for 30 s after
    SIGINT, then SIGTERM): here a case whose fault is a 60 s delay."""
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    cases = ["delay@r0:save4#0~60", "crash@r0:save4#1", "crash@r1:save4#1"]
    p = subprocess.Popen([sys.executable, "-m", "ckpt_harness.cli", "explore", "--job", "torch_save", "--steps", "4",
                          *(a for case in cases for a in ("--case", case)), "--parallel", "1", "--workdir", "work"],
                         cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while not list((tmp_path / "work" / "cases").glob("delay*/fault")):  # the delayed case's run started
            assert p.poll() is None and time.monotonic() < deadline, p.communicate()
            time.sleep(0.2)
        sent = time.monotonic()
        p.send_signal(signal.SIGTERM)
        _, stderr = p.communicate(timeout=120)
    finally:
        p.kill()
    took, budget = time.monotonic() - sent, pace(5.0)
    assert p.returncode == 128 + signal.SIGTERM, stderr
    assert took < budget, f"stopped {took:.1f} s after SIGTERM (budget {budget:.1f} s)"
    ran = [d.name for d in (tmp_path / "work" / "cases").iterdir()]
    assert len(ran) == 1 and ran[0].startswith("delay_r0_save4"), ran  # nothing queued after it started
