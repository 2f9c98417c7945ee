"""`make trainers`' second half: run each recipe's matrix in its own venv and
write docs/matrix-trainers.md.

    python recipes/harness.py [--out ckpt-matrix-trainers] [--scenarios LIST] RECIPE...

For each RECIPE (a directory under recipes/ with a harness.json), runs

    .venv-RECIPE/bin/ckpt-harness matrix --script ... --script-args ... --nproc-per-node 2 --out OUT/RECIPE

timed, then writes docs/matrix-trainers.md: per recipe the command, the
versions, the install time (`.venv-RECIPE/.install-seconds`, written by the
Makefile), the matrix's wall time, the harness's own matrix.md (its table
and a finding per failing cell with its repro), and the recipe's
MATRIX_NOTES.md (what each failing cell means), if it has one. Standard
library only: it runs under any python3.

A recipe whose harness.json says `"needs": "cuda"` is skipped, with one line
naming it and its `needs_why`, where its venv's torch sees no CUDA device
(see `unmet_need`).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECIPES = ROOT / "recipes"


def load(recipe: str) -> dict:
    return json.loads((RECIPES / recipe / "harness.json").read_text())


def cuda_present(recipe: str) -> bool:
    """Whether the recipe's venv's torch sees a CUDA device (`torch.cuda.is_available()`): the question
    its training script asks, answered by the torch it runs on (this file imports no torch)."""
    py = ROOT / f".venv-{recipe}" / "bin" / "python"
    code = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([str(py), "-c", code], capture_output=True).returncode == 0


def unmet_need(recipe: str, config: dict) -> str | None:
    """Why the recipe's matrix cannot run on this machine, or None where it can.

    `"needs": "cuda"` in harness.json is for a trainer that trains and saves
    on CPU but whose own checkpoint loading cannot run there (LLaMA-Factory
    0.9.5: the HF Trainer loads `optimizer.pt` with `map_location=` the
    MULTI_CPU device `cpu:N`, which torch refuses). The project stubs no
    checkpoint code, so on CPU every resume would die in the trainer and the
    matrix would judge an environment limit, not the trainer's
    checkpointing: it is skipped, saying so, and runs where CUDA is present.
    `needs_why` in harness.json says why, in a line."""
    needs = config.get("needs")
    if needs is None:
        return None
    if needs != "cuda":
        raise ValueError(f"recipes/{recipe}/harness.json: needs {needs!r}: only 'cuda' is known")
    if cuda_present(recipe):
        return None
    return (f"needs CUDA (torch.cuda.is_available() is False in .venv-{recipe}): "
            + config.get("needs_why", "its harness.json says so"))


def matrix_command(recipe: str, config: dict, out: Path, scenarios: str | None) -> list[str]:
    cmd = [str(ROOT / f".venv-{recipe}" / "bin" / "ckpt-harness"), "matrix", "--script", config["script"],
           "--nproc-per-node", str(config.get("nproc_per_node", 2)), "--out", str(out)]
    if config.get("script_args"):
        cmd += ["--script-args", config["script_args"]]
    scenarios = scenarios if scenarios is not None else config.get("scenarios")
    if scenarios and scenarios != "all":
        cmd += ["--scenarios", scenarios]
    return cmd


def versions(recipe: str) -> str:
    py = ROOT / f".venv-{recipe}" / "bin" / "python"
    code = ("import importlib.metadata as m, sys; print(sys.version.split()[0], "
            "*[p + ' ' + m.version(p) for p in sys.argv[1:]], sep=', ')")
    packages = ["torch", *load(recipe).get("packages", [])]
    return subprocess.run([str(py), "-c", code, *packages], capture_output=True, text=True, check=True).stdout.strip()


def section(recipe: str, cmd: list[str], out: Path, seconds: float, rc: int) -> str:
    install = ROOT / f".venv-{recipe}" / ".install-seconds"
    lines = [f"## {recipe}", "",
             f"Run by `make trainers` on {date.today().isoformat()}: python {versions(recipe)}.", ""]
    if install.exists():
        lines += [f"Install (`.venv-{recipe}`: venv, torch, the trainer, the harness): "
                  f"{float(install.read_text()):.0f} s.", ""]
    words = [f".venv-{recipe}/bin/ckpt-harness", *cmd[1:]]
    shown = " ".join(shlex.quote(c.replace(str(ROOT) + "/", "")) for c in words)
    lines += ["```sh", f"HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 {shown}", "```", "",
              f"Wall time {seconds / 60:.1f} min, exit status {rc} (a matrix exits non-zero for an UNKNOWN or "
              "ERROR cell, not for FAIL cells: those are the findings).", ""]
    md = out / "matrix.md"
    if md.exists():
        body = md.read_text().splitlines()
        # the harness's own title becomes a sub-heading of this recipe's section
        lines += [("##" + line) if line.startswith("#") else line for line in body]
    else:
        lines += [f"No matrix.md was written (exit status {rc}); see {out}."]
    notes = RECIPES / recipe / "MATRIX_NOTES.md"
    if notes.exists():
        lines += ["", notes.read_text().strip()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("recipes", nargs="+")
    p.add_argument("--out", type=Path, default=ROOT / "ckpt-matrix-trainers")
    p.add_argument("--scenarios", default=None, help="override each recipe's harness.json scenarios ('all': every one)")
    p.add_argument("--doc", type=Path, default=ROOT / "docs" / "matrix-trainers.md")
    p.add_argument("--doc-only", action="store_true",
                   help="run nothing: write the page from the last run's OUT/RECIPE (its matrix.md and run.json)")
    opts = p.parse_args(argv)
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    sections = []
    worst = 0
    for recipe in opts.recipes:
        out = (opts.out / recipe).resolve()
        config = load(recipe)
        unmet = unmet_need(recipe, config)
        if unmet:
            print(f"{recipe}: matrix skipped, {unmet}", flush=True)
            sections.append(f"## {recipe}\n\nNot run by `make trainers` here: {unmet}. "
                            f"See recipes/{recipe}/README.md.\n")
            continue
        cmd = matrix_command(recipe, config, out, opts.scenarios)
        if opts.doc_only:
            ran = json.loads((out / "run.json").read_text())
            seconds, rc = ran["seconds"], ran["exit_status"]
        else:
            print("+", " ".join(shlex.quote(c) for c in cmd), flush=True)
            start = time.monotonic()
            rc = subprocess.call(cmd, cwd=ROOT, env=env)
            seconds = time.monotonic() - start
            print(f"{recipe}: matrix in {seconds:.0f} s, exit status {rc}", flush=True)
            out.mkdir(parents=True, exist_ok=True)
            (out / "run.json").write_text(json.dumps({"seconds": seconds, "exit_status": rc}))
        worst = worst or rc
        sections.append(section(recipe, cmd, out, seconds, rc))
    head = ("# The real trainers' matrix\n\n"
            "Each recipe under `recipes/` run as its users launch it, under `ckpt-harness matrix --script`, "
            "in a venv of its own (`make trainers` regenerates this page; the recipes, their settings and "
            "how the harness is told: each recipe's README.md). Findings that hold in a current release "
            "are in [findings.md](findings.md).\n\n")
    opts.doc.write_text(head + "\n".join(sections))
    print(f"wrote {opts.doc}")
    # a matrix exits non-zero only for what --fail-on counts (unknown, error): failing cells are findings
    return 0 if opts.doc_only else worst


if __name__ == "__main__":
    sys.exit(main())
