"""`matrix --script`: the scenario catalogue against unmodified scripts under real torchrun, a row each.

One small matrix, shared by the tests, over two variants of
tests/scripts/resumable.py (one save at step 2, a step after it, a final
save of the model on rank 0):

* correct: every rank saves step 2 inside `saving()`, staged and renamed;
  it resumes bitwise (faithful PASS). Its ranks then meet in a barrier after
  rank 0's final save, where a run preempted after save 2 stops rank 0: rank
  1 must count as stopped in that barrier, and its final state is not
  judged (it saves nothing after save 2);
* broken: rank 0 writes its checkpoint in place, without the optimizer's
  state: a resume ends elsewhere than the uninterrupted run (faithful
  FAIL), and a crash while state.pt is written leaves a torn file the next
  start takes (atomic FAIL). That scenario is the catalogue's crash narrowed
  to kernel writes and, by its `jobs` pattern, to this row (each case is two
  torchrun runs; a crash that passes is tests/test_script_explore.py's).

Scenarios that set what the scripts were not told how to take (no
--script-args here), or that need a Job's full state, are in the matrix
too, and cost nothing: n/a, saying what to give.
"""

import json
from pathlib import Path

import pytest

from ckpt_harness import cli
from ckpt_harness.config import ScriptConfig
from ckpt_harness import targets
from ckpt_harness.catalogue.matrix import Matrix, files, run_matrix
from ckpt_harness.records import Kind, read_records
from ckpt_harness.catalogue.scenario import select
from ckpt_harness.catalogue.scenario_files import builtin_catalogue, parse
from ckpt_harness.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"
CORRECT = f"{RESUMABLE} {{ckpt_dir}} --steps 3 --save-every 2 --staging"
BROKEN = f"{RESUMABLE} {{ckpt_dir}} --steps 3 --save-every 2 --bug forget-optimizer"
#: The rows' names: the commands without their directories and {ckpt_dir}.
ROWS = ("resumable.py --steps 3 --save-every 2 --staging",
        "resumable.py --steps 3 --save-every 2 --bug forget-optimizer")
#: The catalogue's crash-every-phase, at kernel writes only, on the broken row.
CRASH_AT_WRITE = parse("crash-at-write", {"property": "atomic", "check": "faults", "faults": ["crash"],
                                          "ops": ["write"], "jobs": [ROWS[1]],
                                          "description": "SIGKILL a rank before a write of a save"})
#: Scenarios that set what the scripts were not told how to take (no --script-args), or need a Job's
#: full_state: property -> what their n/a reason must name (tests/test_script_settings.py tells them).
UNTOLD = {"overwrite-safe": "--script-args overwrite=", "rotation-safe": "--script-args 'keep_last=",
          "reshardable": "full_state", "convertible": "give --checkpoint-layout"}


@pytest.fixture(scope="module")
def matrix(tmp_path_factory) -> tuple[Matrix, Path]:
    workdir = tmp_path_factory.mktemp("script-matrix")
    scenarios = [CRASH_AT_WRITE, *select(builtin_catalogue(), [
        "resume-every-save", "overwrite-complete", "rotation-crash", "multi-node-skew", "world-size-grow",
        "convert-last-save"])]
    # the broken row cold at once: warm, each case it fails would be run again cold to confirm it
    scripts = [ScriptConfig(script=s, nproc_per_node=2, timeout=120.0, cold_start=s == BROKEN)
               for s in (CORRECT, BROKEN)]
    return run_matrix([targets.of(c) for c in scripts], scenarios, workdir=workdir, keep=True), workdir


def cells(m: Matrix) -> dict:
    return {(c.job, c.property): c for c in m.cells()}


def test_a_broken_script_fails_under_its_property_and_the_correct_one_passes(matrix):
    m, workdir = matrix
    assert tuple(m.names) == ROWS
    correct, broken = ROWS
    found = cells(m)
    explain = "\n".join(f"{c.job} · {c.property}: {c.verdict.value} {c.reason}" for c in m.cells())
    assert found[correct, "faithful"].verdict is Verdict.PASS, explain
    assert found[broken, "faithful"].verdict is Verdict.FAIL, explain
    assert "resume@2" in found[broken, "faithful"].reason, explain
    assert found[broken, "faithful"].repro.startswith(f"ckpt-harness run --script '{BROKEN}'")
    assert found[broken, "atomic"].verdict is Verdict.FAIL, explain
    assert "step_2/state.pt" in found[broken, "atomic"].reason, explain
    assert found[broken, "atomic"].repro.startswith(f"ckpt-harness explore --script '{BROKEN}'")
    assert found[correct, "atomic"].verdict is Verdict.NA, explain  # the scenario's jobs name the broken row only
    assert m.world_size == 2 and m.settings["nproc_per_node"] == 2 and m.settings["nnodes"] == 1
    # The correct row's preempted run stopped rank 1 in the barrier after rank 0's final save, well before the
    # deadline: a run that waited for rank 1 to reach a save or return would have hung there.
    stop = workdir / "job0" / "resume-every-save" / "resume@2" / "stop"
    assert all(any(rec["event"] == Kind.STOPPED for rec in read_records(stop, rank)) for rank in (0, 1))


def test_scenarios_that_set_what_a_script_was_not_told_are_not_applicable_saying_what_to_give(matrix):
    m, _ = matrix
    found = cells(m)
    for row in m.names:
        for prop, named in UNTOLD.items():
            assert found[row, prop].verdict is Verdict.NA and named in found[row, prop].reason, found[row, prop]
        skew = found[row, "skew-safe"]  # multi-node-skew: two real nodes, but a rotating save
        assert skew.verdict is Verdict.NA and "keep_last" in skew.reason and "--script-args" in skew.reason, skew
    assert m.complete


def test_one_golden_run_serves_a_row_and_the_commands_are_in_the_output(matrix, tmp_path):
    m, workdir = matrix
    for i in range(2):  # the verification judged against the explorations' golden run, made once
        assert (workdir / f"job{i}" / "golden" / "run").is_dir()
        assert not (workdir / f"job{i}" / "resume-every-save" / "golden").exists()
    md, js = files.write(m, tmp_path)
    data = json.loads(js.read_text())
    assert {name: row["settings"]["script"] for name, row in data["rows"].items()} == {m.names[0]: CORRECT,
                                                                                       m.names[1]: BROKEN}
    assert data["settings"]["nproc_per_node"] == 2 and data["jobs"] == m.names
    assert f"`{BROKEN}`" in md.read_text()


@pytest.mark.parametrize("argv, says", [
    (["--script", "t.py {ckpt_dir}", "--job", "dcp"], "not both"),
    (["--script", "t.py {ckpt_dir}", "--world-size", "2"], "--world-size belong to job mode"),
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
    from ckpt_harness.targets.script import row_name

    assert row_name(script) == name


def test_a_script_that_is_not_there_is_bad_input_before_anything_runs(capsys, tmp_path):
    code = cli.main(["matrix", "--script", "missing.py {ckpt_dir}", "--scenarios", "resume-every-save",
                     "--out", str(tmp_path / "out"), "--workdir", str(tmp_path / "work")])
    assert code == cli.EXIT_USAGE and "no script at 'missing.py'" in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "work").exists()
