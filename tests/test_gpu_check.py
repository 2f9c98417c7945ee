"""ci/gpu_check.py, the GPU check (issue 66, item 5), where no GPU is: it runs nothing and says so, and what
it would run on one is what the CLI accepts. Its runs on CUDA are recorded in docs/findings.md when a machine
with one is at hand."""

import shlex
import subprocess
import sys
from pathlib import Path

from ckpt_harness import cli

ROOT = Path(__file__).resolve().parent.parent
CHECK = ROOT / "ci" / "gpu_check.py"


def test_without_a_gpu_nothing_runs_and_it_says_so_not_a_pass(tmp_path):
    done = subprocess.run([sys.executable, str(CHECK), "--out", str(tmp_path / "out")], capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "no CUDA device here" in done.stderr and "nothing was run" in done.stderr, done.stderr
    assert not (tmp_path / "out").exists()


def test_what_it_runs_on_a_gpu_is_what_the_cli_takes():
    done = subprocess.run([sys.executable, str(CHECK), "--out", "unused", "--dry-run", "--world-size", "2"],
                          capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert done.returncode == 0, done.stdout + done.stderr
    commands = [shlex.split(line) for line in done.stdout.splitlines() if not line.startswith("#")]
    left = [line for line in done.stdout.splitlines() if line.startswith("# left out: ")]
    named = set()
    for argv in commands:
        assert argv[1:3] == ["-m", "ckpt_harness.cli"], argv
        args = cli._parser().parse_args(argv[3:])  # a usage error would exit here
        if "--job" in argv:  # the built-in jobs, and dcp's hangs
            assert args.backend == "nccl" and args.world_size == 2, argv
            named.add(args.job)
        else:
            assert args.nproc_per_node == 2 and args.case == ["resume@2"], argv
            named.add(Path(argv[0]).parent.parent.name)  # .venv-RECIPE
    # every built-in job of the check is run or said missing, and so is every recipe
    for job in ("torch_save", "dcp", "dcp_async", "deepspeed", "hf_trainer"):
        assert job in named or any(f"job {job}:" in line for line in left), (job, done.stdout)
    for recipe in sorted(p.parent.name for p in (ROOT / "recipes").glob("*/harness.json")):
        assert f".venv-{recipe}" in named or any(f"recipe {recipe}:" in line for line in left), (recipe, done.stdout)
