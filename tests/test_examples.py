"""The examples in docs/ run as a user runs them: from another directory,
the example's folder on PYTHONPATH, through the command line. The job
example imports nothing private, so that it can be copied as it is."""

import ast
from pathlib import Path

import ckpt_harness
from tests.clirun import cli

EXAMPLES = Path(__file__).resolve().parent.parent / "docs" / "examples"


def test_the_self_contained_job_imports_only_the_public_api():
    tree = ast.parse((EXAMPLES / "minimal_job.py").read_text())
    ours = [(node.module, [a.name for a in node.names]) for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ckpt_harness")]
    ours += [(a.name, []) for node in ast.walk(tree) if isinstance(node, ast.Import) for a in node.names
             if a.name.startswith("ckpt_harness")]
    assert ours == [("ckpt_harness", ["Job"])], ours
    assert set(ckpt_harness.__all__) >= {"Job"}


def test_the_self_contained_job_passes_a_run_and_an_exploration_from_another_directory(tmp_path):
    env = {"PYTHONPATH": str(EXAMPLES)}
    ran = cli("run", "--job", "minimal_job:MinimalJob", "--quiet", cwd=tmp_path, env_extra=env)
    assert ran.returncode == 0 and "state after load  PASS" in ran.stdout, ran.stdout + ran.stderr
    explored = cli("explore", "--job", "minimal_job:MinimalJob", "--faults", "crash,power-loss", "--corruptions",
                   "bit-flip,delete", "--quiet", cwd=tmp_path, env_extra=env)
    assert explored.returncode == 0 and " fail" not in explored.stdout.splitlines()[-1], explored.stdout[-3000:]
