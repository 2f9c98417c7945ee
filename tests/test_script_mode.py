"""Script mode judged: unmodified scripts under real torchrun, their resumes verified bitwise by the oracle.

Each verification is a golden run, a run preempted right after save 2 and
the same command again on its directory (`--case resume@2`): three torchrun
runs of fresh interpreters. Every broken script is flagged under a named
check and its correct twin passes.
"""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_harness.records import Kind, read_records
from ckpt_harness.script_mode import verify_script
from ckpt_harness.verdict import Verdict

ROOT = Path(__file__).resolve().parent.parent
RESUMABLE = ROOT / "tests" / "scripts" / "resumable.py"


def script(*flags: str) -> str:
    return " ".join([str(RESUMABLE), "{ckpt_dir}", "--steps", "4", "--save-every", "2", *flags])


def verdicts(report) -> dict[tuple[str, str], Verdict]:
    return {(r.case, r.check): r.verdict for r in report.results}


@pytest.mark.parametrize("nnodes, nproc_per_node", [(1, 2), (2, 1)])
def test_a_correct_script_resumes_bitwise(tmp_path, nnodes, nproc_per_node):
    report = verify_script(script(), workdir=tmp_path, cases=["resume@2"], nnodes=nnodes,
                           nproc_per_node=nproc_per_node)
    assert report.verdict is Verdict.PASS, report.explain()
    assert verdicts(report) == {
        ("golden", "live"): Verdict.PASS, ("resume@2", "live"): Verdict.PASS,
        ("resume@2", "load step"): Verdict.PASS, ("resume@2", "saves after resume"): Verdict.PASS,
        ("resume@2", "final state"): Verdict.PASS,
    }
    # The preempted run stopped rank 0 right after save 2: the next save had not begun writing.
    assert [r["step"] for r in read_records(tmp_path / "resume@2" / "stop", 0) if r["event"] == Kind.STOPPED] == [2]
    golden = read_records(tmp_path / "golden" / "run", 0)
    saved = [(r["step"], r["source"], sorted(r["state"])[:2]) for r in golden if r["event"] == Kind.SAVED]
    assert saved[:2] == [(2, "path", ["observed.0.torch_rng", "state.pt.model.bias"]),
                         (4, "path", ["observed.0.torch_rng", "state.pt.model.bias"])]
    assert [r["event"] for r in golden][-2:] == [Kind.FINAL, Kind.FINISHED]


def test_a_script_that_forgets_optimizer_state_is_flagged(tmp_path):
    report = verify_script(script("--bug", "forget-optimizer"), workdir=tmp_path, cases=["resume@2"],
                           nproc_per_node=2)
    found = verdicts(report)
    assert found[("resume@2", "saves after resume")] is Verdict.FAIL, report.explain()
    assert found[("resume@2", "load step")] is Verdict.PASS  # it did resume, only not all of it
    failed = next(r for r in report.results if r.check == "saves after resume")
    assert "save 4 differs" in failed.summary and "model" in failed.summary


def test_staging_renamed_on_every_node_fails_across_nodes(tmp_path):
    report = verify_script(script("--staging", "--bug", "rename-per-node"), workdir=tmp_path, nnodes=2,
                           nproc_per_node=1)
    assert verdicts(report) == {("golden", "live"): Verdict.FAIL}, report.explain()
    summary = report.results[0].summary
    assert "FileNotFoundError in save 2" in summary, summary


def test_a_staging_rename_on_every_node_passes_on_one_node(tmp_path):
    """One node has one local rank 0: the per-node rename is the rank-0 rename
    there, the same code path as the correct script's (which
    test_script_explore.py also passes)."""
    report = verify_script(script("--staging", "--bug", "rename-per-node"), workdir=tmp_path, cases=["resume@2"],
                           nproc_per_node=2)
    assert report.verdict is Verdict.PASS, report.explain()
    # `ckpt_harness.saving(step)` made the whole block one save on every rank, rank 1 included.
    assert [r["step"] for r in read_records(tmp_path / "golden" / "run", 1) if r["event"] == Kind.SAVED] == [2, 4]


def test_the_opt_ins_do_nothing_outside_the_harness(tmp_path):
    """A script that imports ckpt_harness runs as before under plain python."""
    code = (
        "import ckpt_harness\n"
        "with ckpt_harness.saving(3):\n"
        "    x = 1\n"
        "fn = ckpt_harness.observe(lambda: {'x': x})\n"
        "print(fn()['x'], 'torch' in __import__('sys').modules)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["1", "False"]


def test_a_script_run_is_recorded_and_traced_like_a_job_run(tmp_path):
    """dcp.save, imported by the script after the bootstrap, is a save on
    every rank: its phase in the trace (the file operations and collectives
    fault points are made of), what it was handed, in the records the
    oracle reads; no framework the script did not import is imported."""
    from ckpt_harness.config import ScriptConfig
    from ckpt_harness.inject.trace import EventKind
    from ckpt_harness.script_mode import launch_script

    config = ScriptConfig(script=f"{ROOT / 'tests' / 'scripts' / 'dcp_save.py'} {{ckpt_dir}}", nproc_per_node=2)
    run = launch_script(config, "traced", tmp_path / "ckpt", tmp_path / "run", trace_files=True)
    assert run.ok, [r.outcome for r in run.ranks]
    for r in run.ranks:
        saved = [(rec["step"], rec["source"], sorted(rec["state"])) for rec in r.records if rec["event"] == Kind.SAVED]
        assert saved == [(2, "path", [f"state_dict.w{r.rank}"]), (4, "path", [f"state_dict.w{r.rank}"])]
        in_save = [e for e in r.events if e.phase == "save 2"]
        assert any(e.kind is EventKind.COLLECTIVE for e in in_save)
        assert any(e.kind is EventKind.OPEN and e.path.startswith("step_2/") for e in in_save)
        assert (tmp_path / "ckpt" / f"imported{r.rank}.json").read_text() == "[]"
    assert run.states(Kind.FINAL)[1]["last save.state_dict.w1"].shape == (4,)


def cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "ckpt_harness.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


def test_a_script_that_resumes_from_scratch_is_flagged_through_the_cli(tmp_path):
    """The CLI's `run --script`, its report, its JSON and the line that replays the failing case."""
    out = cli("run", "--script", script("--bug", "from-scratch"), "--nproc-per-node", "2", "--case", "resume@2",
              "--workdir", str(tmp_path / "work"), "--json", str(tmp_path / "report.json"), cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the script resumed from scratch" in out.stdout
    repro = next(line for line in out.stdout.splitlines() if line.startswith("repro: "))
    assert repro.endswith("--nproc-per-node 2 --case resume@2") and "--script" in repro
    found = {(c["case"], c["check"]): c for c in json.loads((tmp_path / "report.json").read_text())["cases"]}
    assert found[("resume@2", "load step")]["verdict"] == "fail"
    assert "saved step 2 again" in found[("resume@2", "load step")]["summary"]
    # Starting over ends where the uninterrupted run ended: only the save it repeated tells.
    assert found[("resume@2", "final state")]["verdict"] == "pass"


@pytest.mark.parametrize("args, says", [
    (("run",), "either --job"),
    (("run", "--job", "torch_save", "--script", "x.py"), "either --job"),
    (("run", "--script", "x.py {ckpt_dir}", "--steps", "4"), "--steps apply to --job runs only"),
    (("run", "--job", "torch_save", "--nnodes", "2"), "--nnodes belong to script mode"),
    (("run", "--script", "missing.py {ckpt_dir}"), "no script at 'missing.py'"),
    (("explore", "--script", "x.py {ckpt_dir}", "--world-size", "2"), "--world-size apply to --job runs only"),
    (("explore", "--job", "torch_save", "--nproc-per-node", "2"), "--nproc-per-node belong to script mode"),
    (("explore", "--script", "missing.py {ckpt_dir}"), "no script at 'missing.py'"),
])
def test_the_cli_refuses_a_mixed_or_missing_mode_with_what_to_give(tmp_path, args, says):
    out = cli(*args, cwd=tmp_path)
    assert out.returncode == 2 and says in out.stderr, out.stderr


def test_a_tiny_hf_trainer_script_is_verified_through_its_save_checkpoint(tmp_path):
    """`Trainer._save_checkpoint` is the save, wrapped when the script imports
    transformers: its step is the Trainer's, its state what it wrote. The
    same Trainer started on a directory that holds checkpoints without being
    handed one saves their steps again: started from scratch."""
    pytest.importorskip("transformers")
    from ckpt_harness import oracle
    from ckpt_harness.config import ScriptConfig
    from ckpt_harness.script_mode import launch_script

    command = f"{ROOT / 'tests' / 'scripts' / 'hf_train.py'} {{ckpt_dir}} 4 2"
    report = verify_script(command, workdir=tmp_path / "verify", cases=["resume@2"], nproc_per_node=2)
    assert report.verdict is Verdict.PASS, report.explain()
    saved = [rec for rec in read_records(tmp_path / "verify" / "golden" / "run", 0) if rec["event"] == Kind.SAVED]
    assert [(rec["step"], rec["source"]) for rec in saved] == [(2, "framework"), (4, "framework")]
    assert {k.split(".")[0] for k in saved[0]["state"]} >= {"model", "optimizer", "scheduler", "rng_state_0"}

    ckpt = shutil.copytree(tmp_path / "verify" / "golden" / "ckpt", tmp_path / "ckpt")  # checkpoints 2 and 4
    assert sorted(p.name for p in ckpt.glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    config = ScriptConfig(script=f"{command} from-scratch", nproc_per_node=2)
    resumed = launch_script(config, "resumed run", ckpt, tmp_path / "resume")
    assert resumed.ok, [r.outcome for r in resumed.ranks]
    judged = oracle.judge_resume_point("resume@4", resumed, 4, None)
    assert judged.verdict is Verdict.FAIL and "saved step 2 again" in judged.summary, judged.summary
