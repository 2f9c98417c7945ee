"""The GPU check (issue 66, item 5): the built-in jobs on NCCL, and the recipes on CUDA, where a GPU is.

    python ci/gpu_check.py --out DIR              # on a machine with CUDA: run it, write DIR/gpu_check.md
    python ci/gpu_check.py --out DIR --dry-run    # anywhere: print what it would run, run nothing

This machine kind has no GPU, so everything the suite proves runs on gloo.
What only a GPU shows is NCCL under the harness: its process groups, the
jobs' tensors on `cuda:LOCAL_RANK`, a hang inside an NCCL collective, and
the recipes' trainers with their CPU adaptations off (each recipe's cpu.py
acts only where `torch.cuda.is_available()` is False). One short run each,
chosen to fit a borrowed machine's few minutes:

* every built-in job whose framework is installed, `run --job J --backend
  nccl --world-size W --case resume@2` (the golden run, a stop at save 2,
  the resume, judged bitwise), then `dcp` with a rank blocked at each
  collective of its last save (`explore --faults hang --ops collective`,
  as the `final-save-blocked` scenario does): a hang inside NCCL, which
  must end with every rank's stack, never a frozen run;
* every recipe whose venv exists (`.venv-RECIPE`, `make trainers`), `run
  --script ... --nproc-per-node W --case resume@2` in that venv.

W is the number of CUDA devices, at most 2 (NCCL refuses two ranks on one
device). Each run has the harness's own deadlines and a wall limit here on
top. Nothing is judged by this script: the harness judges, this records
what it said (the command, its exit status, its verdict lines, its time)
into DIR/gpu_check.md, with each run's whole output under DIR/logs/.

With no CUDA device it runs nothing, says so and exits 2: a check that
could not run is not a pass.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import platform
import re
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: The built-in jobs tried, with the package each needs (a job whose framework is missing is listed as such).
JOBS = {"torch_save": "torch", "dcp": "torch", "dcp_async": "torch", "deepspeed": "deepspeed",
        "hf_trainer": "transformers"}
#: A verdict line of the harness's tables and summaries.
VERDICT = re.compile(r"\b(PASS|FAIL|UNKNOWN|ERROR|N/A)\b")
#: Exit status when nothing could run here.
NO_GPU = 2
#: The harness's exit statuses of a run it judged: every check passed (0), or a finding (1: a FAIL is what
#: the check is there to record, `dcp`'s hang at its last save among them). Anything else was not judged.
JUDGED = (0, 1)


@dataclass(frozen=True)
class Run:
    """One command of the check: what it is called in the report, and its argv."""

    name: str
    argv: list[str]
    limit: float


def cuda_devices() -> int:
    try:
        import torch
    except ImportError:
        return 0
    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def plan(world_size: int, python: Path) -> tuple[list[Run], list[str]]:
    """The runs, and a line for each one left out (its framework or venv missing)."""
    harness = [str(python), "-m", "ckpt_harness.cli"]
    runs, left = [], []
    for job, package in JOBS.items():
        if importlib.util.find_spec(package) is None:  # the jobs run under this interpreter
            left.append(f"job {job}: {package} is not installed in {python}")
            continue
        runs.append(Run(f"job {job}", [*harness, "run", "--job", job, "--backend", "nccl", "--world-size",
                                       str(world_size), "--case", "resume@2"], 300))
    # `scenario` and `matrix` take no --backend (a matrix row's settings are its world size, timeout, launcher
    # and cold start): the hang at the last save's collectives comes from `explore`, as final-save-blocked's does.
    runs.append(Run("dcp hang at the last save's collectives",
                    [*harness, "explore", "--job", "dcp", "--backend", "nccl", "--world-size", str(world_size),
                     "--save", "last", "--faults", "hang", "--ops", "collective", "--corruptions", "",
                     "--no-after"], 300))
    for config in sorted((ROOT / "recipes").glob("*/harness.json")):
        recipe = config.parent.name
        venv = ROOT / f".venv-{recipe}" / "bin" / "python"
        if not venv.exists():
            left.append(f"recipe {recipe}: no .venv-{recipe} (make .venv-{recipe}/.installed, which needs the "
                        f"package registries)")
            continue
        script = json.loads(config.read_text())["script"]
        runs.append(Run(f"recipe {recipe}", [str(venv), "-m", "ckpt_harness.cli", "run", "--script", script,
                                             "--nproc-per-node", str(world_size), "--case", "resume@2"], 600))
    return runs, left


def machine() -> list[str]:
    import torch

    lines = [f"python {platform.python_version()}, torch {torch.__version__}, CUDA {torch.version.cuda}, "
             f"NCCL {'.'.join(map(str, torch.cuda.nccl.version()))}"]
    lines += [f"device {i}: {torch.cuda.get_device_name(i)}" for i in range(torch.cuda.device_count())]
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
        lines += smi.stdout.splitlines()
    return lines


def run(one: Run, logs: Path) -> tuple[int, float, list[str]]:
    log = logs / (re.sub(r"[^A-Za-z0-9_.-]+", "_", one.name) + ".txt")
    start = time.monotonic()
    with open(log, "w") as out:
        try:
            code = subprocess.run(one.argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                                  timeout=one.limit).returncode
        except subprocess.TimeoutExpired:
            code = -1
    took = time.monotonic() - start
    verdicts = [line.rstrip() for line in log.read_text(errors="replace").splitlines()
                if VERDICT.search(line) and not line.startswith("[ckpt_harness]")]
    return code, took, verdicts[-12:]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where gpu_check.md and the logs go (made)")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    parser.add_argument("--world-size", type=int, help="ranks per run (default: the CUDA devices, at most 2)")
    args = parser.parse_args(argv)
    python = Path(sys.executable)
    devices = cuda_devices()
    world_size = args.world_size or max(1, min(2, devices))
    runs, left = plan(world_size, python)
    if args.dry_run:
        for one in runs:
            print(shlex.join(one.argv))
        for line in left:
            print(f"# left out: {line}")
        return 0
    if not devices:
        print("gpu_check: no CUDA device here (torch.cuda.is_available() is False): nothing was run. Run it on "
              "a machine with one; --dry-run prints what it runs.", file=sys.stderr)
        return NO_GPU
    logs = args.out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    report = ["# The GPU check", "", f"`python ci/gpu_check.py`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
              f"world size {world_size}.", "", *[f"- {line}" for line in machine()], ""]
    unjudged = []
    for one in runs:
        code, took, verdicts = run(one, logs)
        if code not in JUDGED:
            unjudged.append(one.name)
        said = "cut at its wall limit" if code < 0 else f"exit {code}"
        print(f"{one.name}: {said}, {took:.0f} s", flush=True)
        report += [f"## {one.name}: {said}, {took:.0f} s", "", "```sh", shlex.join(one.argv), "```", "",
                   "```text", *verdicts, "```", ""]
    report += [f"- left out: {line}" for line in left]
    (args.out / "gpu_check.md").write_text("\n".join(report) + "\n")
    print(f"wrote {args.out / 'gpu_check.md'}")
    if unjudged:
        print(f"gpu_check: not judged (the harness could not run them to a verdict): {', '.join(unjudged)}",
              file=sys.stderr)
    return 1 if unjudged else 0


if __name__ == "__main__":
    sys.exit(main())
