"""The real trainers' recipes (recipes/<trainer>/, issue 66).

Cheap, always: every recipe's Python parses, its README's launch lines
(`torchrun ... PATH.py`, `--script 'PATH ...'`) and its harness.json name
files that exist, its trainer is pinned, its CPU adaptations are in one
module.

End to end, OLMo-core only (the cheapest real trainer), in the venv `make
trainers` builds (.venv-olmo_core; skipped without it): the recipe run as
users configure it and its planted twin, both through `ckpt-harness
explore` in that venv, on one case: a crash of rank 0 just before it
writes `.metadata.json` into save 2's step directory. The directory is
then whole but for the file that makes it a checkpoint to OLMo-core's
loader (docs/findings.md). With `--save-overwrite` (OLMo-core's example train.py) the resume
loads step 0, trains again and replaces step 2: PASS. With OLMo-core's own
default, `save_overwrite=False`, the resume loads step 0, trains again and
dies saving step 2: `FileExistsError` on the torn directory (FAIL, named).
"""

import ast
import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RECIPES = sorted(p for p in (ROOT / "recipes").iterdir() if (p / "README.md").exists())
OLMO_VENV = ROOT / ".venv-olmo_core"


def launch_paths(readme: str) -> list[str]:
    """The script paths the README's launch lines name: what follows
    `torchrun [--opt V ...]` and the first word of each `--script '...'`."""
    paths = []
    for line in readme.splitlines():
        line = line.strip()
        if line.startswith("torchrun "):
            words = shlex.split(line.split("#")[0])
            paths += [w for w in words[1:] if w.endswith(".py")][:1]
        for script in re.findall(r"--script '([^']+)'", line):
            paths.append(shlex.split(script)[0])
    return paths


@pytest.mark.parametrize("recipe", RECIPES, ids=[p.name for p in RECIPES])
def test_recipe_files(recipe: Path):
    for source in recipe.glob("*.py"):
        ast.parse(source.read_text(), filename=str(source))
    readme = (recipe / "README.md").read_text()
    paths = launch_paths(readme)
    assert paths, f"{recipe.name}/README.md has no launch line (torchrun ... or --script '...')"
    for path in paths:
        assert (ROOT / path).is_file(), f"{recipe.name}/README.md launches {path}, which does not exist"
    config = json.loads((recipe / "harness.json").read_text())
    assert "{ckpt_dir}" in config["script"]
    assert (ROOT / shlex.split(config["script"])[0]).is_file()
    pins = [line for line in (recipe / "requirements.txt").read_text().splitlines() if line and line[0] != "#"]
    assert pins and all("==" in p for p in pins), f"{recipe.name}: the trainer unpinned: {pins}"
    assert "torch==2.13.0" in (ROOT / "recipes" / "constraints.txt").read_text()
    # CPU adaptations live in one module, cpu.py, and the script imports it
    if (recipe / "cpu.py").exists():
        assert "import cpu" in (recipe / "train.py").read_text()


def test_launch_paths_reads_both_forms():
    readme = ("torchrun --nproc-per-node 2 recipes/x/train.py runs/ckpt --steps 8\n"
              "ckpt-harness run --script 'recipes/x/train.py {ckpt_dir} --steps 4' --nproc-per-node 2\n")
    assert launch_paths(readme) == ["recipes/x/train.py", "recipes/x/train.py"]


def olmo_explore(tmp_path: Path, *flags: str) -> tuple[dict, str, float]:
    if not (OLMO_VENV / "bin" / "ckpt-harness").exists():
        pytest.skip(f"no {OLMO_VENV.name} (OLMo-core's venv): run make trainers first")
    script = f"recipes/olmo_core/train.py {{ckpt_dir}} --steps 4 {' '.join(flags)}".strip()
    report = tmp_path / "report.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    start = time.monotonic()
    done = subprocess.run(
        [str(OLMO_VENV / "bin" / "ckpt-harness"), "explore", "--script", script, "--nproc-per-node", "2",
         "--save", "2", "--faults", "crash", "--no-after", "--case", CASE, "--cold-start",
         "--keep", "none", "--json", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - start
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text()), done.stdout + done.stderr, took


#: Rank 0 killed as it opens the temporary file of `.metadata.json` in step2/,
#: which it had just renamed in from step2-tmp/ (the file is opened through
#: tempfile with a random name, which the probes see as `open(step2)`; the
#: rename of that file cannot be named, its random name changes every run).
#: Cold from the start: a case that fails warm is run again cold anyway.
CASE = "crash@r0:save2/open(step2)"


def test_olmo_core_save_overwrite_passes(tmp_path):
    report, out, took = olmo_explore(tmp_path, "--save-overwrite")
    print(f"took {took:.0f} s")
    assert report["verdict"] == "pass", out[-4000:]


def test_olmo_core_default_fails_file_exists(tmp_path):
    report, out, took = olmo_explore(tmp_path)
    print(f"took {took:.0f} s")
    assert report["verdict"] == "fail", out[-4000:]
    assert "FileExistsError" in out, out[-4000:]
