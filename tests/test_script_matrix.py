"""`matrix --script`: the scenario catalogue against unmodified scripts under real torchrun, a row each.

One small matrix, shared by the tests, over tests/scripts/resumable.py (one
save at step 2, a step after it) and its variant whose checkpoint lacks the
optimizer's state:

* faithful (the catalogue's resume-every-save): the first resumes bitwise
  (PASS), the variant ends elsewhere than the uninterrupted run (FAIL);
* atomic: the first writes its checkpoint in place, so a crash while state.pt
  is written leaves a torn file the next start takes (FAIL). The scenario is
  the catalogue's crash narrowed to kernel writes and, through its `jobs`
  pattern, to the first row: each case is two torchrun runs, and a crash
  that passes is `explore --script`'s test (tests/test_script_explore.py).

Scenarios only a Job can honour are in the matrix too, and cost nothing:
n/a, saying why.
"""

import json
from pathlib import Path

import pytest

from ckpt_harness import cli
from ckpt_harness.config import ScriptConfig
from ckpt_harness.matrix import Matrix, run_matrix
from ckpt_harness.scenario import builtin_catalogue, parse, select
from ckpt_harness.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"
IN_PLACE = f"{RESUMABLE} {{ckpt_dir}} --steps 3 --save-every 2"
FORGETS_OPTIMIZER = f"{IN_PLACE} --bug forget-optimizer"
#: The rows' names: the commands without their directories and {ckpt_dir}.
ROWS = ("resumable.py --steps 3 --save-every 2", "resumable.py --steps 3 --save-every 2 --bug forget-optimizer")
#: The catalogue's crash-every-phase, at kernel writes only, on the first row.
CRASH_AT_WRITE = parse("crash-at-write", {"property": "atomic", "check": "faults", "faults": ["crash"],
                                          "ops": ["write"], "jobs": [ROWS[0]],
                                          "description": "SIGKILL a rank before a write of a save"})
#: Job-only scenarios: property -> what their n/a reason must name.
JOB_ONLY = {"overwrite-safe": "ctx.overwrite", "rotation-safe": "keep_last = 1", "reshardable": "full_state",
            "live": "hang_timeout"}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> tuple[Matrix, Path]:
    workdir = tmp_path_factory.mktemp("script-matrix")
    scenarios = [CRASH_AT_WRITE, *select(builtin_catalogue(), [
        "resume-every-save", "overwrite-complete", "rotation-crash", "multi-node-skew", "world-size-grow",
        "final-save-blocked"])]
    scripts = [ScriptConfig(script=s, nproc_per_node=2, timeout=120.0) for s in (IN_PLACE, FORGETS_OPTIMIZER)]
    return run_matrix((), scenarios, scripts=scripts, workdir=workdir, keep=True), workdir


def cells(m: Matrix) -> dict:
    return {(c.job, c.property): c for c in m.cells()}


def test_a_broken_script_fails_under_its_property_and_the_correct_one_passes(matrix):
    m, _ = matrix
    assert tuple(m.jobs) == ROWS
    in_place, forgets = ROWS
    found = cells(m)
    explain = "\n".join(f"{c.job} · {c.property}: {c.verdict.value} {c.reason}" for c in m.cells())
    assert found[in_place, "atomic"].verdict is Verdict.FAIL, explain
    assert "step_2/state.pt" in found[in_place, "atomic"].reason, explain
    assert found[in_place, "atomic"].repro.startswith(f"ckpt-harness explore --script '{IN_PLACE}'")
    assert found[forgets, "atomic"].verdict is Verdict.NA, explain  # the scenario's jobs name the first row only
    assert found[in_place, "faithful"].verdict is Verdict.PASS, explain
    assert found[forgets, "faithful"].verdict is Verdict.FAIL, explain
    assert "resume@2" in found[forgets, "faithful"].reason, explain
    assert found[forgets, "faithful"].repro.startswith(f"ckpt-harness run --script '{FORGETS_OPTIMIZER}'")
    assert m.world_size == 2 and m.settings["nproc_per_node"] == 2 and m.settings["nnodes"] == 1


def test_scenarios_only_a_job_honours_are_not_applicable_with_the_reason(matrix):
    m, _ = matrix
    found = cells(m)
    for row in m.jobs:
        for prop, named in JOB_ONLY.items():
            assert found[row, prop].verdict is Verdict.NA and named in found[row, prop].reason, found[row, prop]
        skew = found[row, "skew-safe"]  # multi-node-skew: simulated nodes
        assert skew.verdict is Verdict.NA and "nodes = 2" in skew.reason and "--nnodes" in skew.reason, skew
    assert m.complete


def test_one_golden_run_serves_a_row_and_the_commands_are_in_the_output(matrix, tmp_path):
    m, workdir = matrix
    for i in range(2):  # the verification judged against the explorations' golden run, made once
        assert (workdir / f"job{i}" / "golden" / "run").is_dir()
        assert not (workdir / f"job{i}" / "resume-every-save" / "golden").exists()
    md, js = m.write(tmp_path)
    data = json.loads(js.read_text())
    assert data["scripts"] == {m.jobs[0]: IN_PLACE, m.jobs[1]: FORGETS_OPTIMIZER}
    assert data["settings"]["nproc_per_node"] == 2 and data["jobs"] == m.jobs
    assert f"`{FORGETS_OPTIMIZER}`" in md.read_text()


@pytest.mark.parametrize("argv, says", [
    (["--script", "t.py {ckpt_dir}", "--job", "dcp"], "not both"),
    (["--script", "t.py {ckpt_dir}", "--world-size", "2"], "--nnodes x --nproc-per-node"),
    (["--script", "t.py {ckpt_dir}", "--max-restarts", "1"], "run --script --max-restarts"),
    (["--job", "dcp", "--nproc-per-node", "2"], "belong to script mode"),
])
def test_the_cli_refuses_options_of_the_other_mode(argv, says, capsys, tmp_path):
    assert cli.main(["matrix", *argv, "--out", str(tmp_path)]) == cli.EXIT_USAGE
    assert says in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("script, name", [
    ("python /home/me/train.py --output_dir {ckpt_dir} --max_steps 8", "train.py --max_steps 8"),
    ("train.py --output_dir={ckpt_dir}/run --lr 1e-3", "train.py --lr 1e-3"),
    ("train.py {ckpt_dir} --fsync", "train.py --fsync"),
    ("train.py {ckpt_dir} " + "--flag " * 30, ("train.py " + "--flag " * 30)[:79] + "…"),
])
def test_a_row_is_named_by_its_command_without_the_checkpoint_directory(script, name):
    from ckpt_harness.script_bench import row_name

    assert row_name(script) == name
