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
        cmd = matrix_command(recipe, load(recipe), out, opts.scenarios)
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
