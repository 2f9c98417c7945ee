"""The real trainers' recipes (recipes/<trainer>/, issue 66).

Cheap, always: every recipe's Python parses, its README's launch lines
(`torchrun ... PATH.py`, `--script 'PATH ...'`) and its harness.json name
files that exist, its trainer is pinned, its CPU adaptations are in one
module. And `make trainers` (recipes/harness.py) skips, with its reason, the
matrix of a recipe whose harness.json says `"needs": "cuda"` on a machine
without CUDA (LLaMA-Factory's: its own resume cannot run on CPU), and runs it
where CUDA is present: shown both ways without running a trainer.

End to end, OLMo-core (the cheapest real trainer) and Megatron-Core, each
in the venv `make trainers` builds (.venv-<recipe>; skipped without it,
saying so), both
through that venv's `ckpt-harness`, one targeted case each (3 torchrun runs,
35-60 s each on the 2-core box):

* as users configure it (`--save-overwrite`, OLMo-core's example), stopped
  between saves 0 and 2 (`run --case between@1`: after one optimizer step)
  and resumed: every check passes, bitwise (a resume from a later save
  carries OLMo-core's RNG finding, docs/findings.md); and its single-writer
  check passes (`scenario write-conflicts`);
* its planted twin, OLMo-core's own default `save_overwrite=False`, with
  rank 0 killed just before it writes `.metadata.json` into save 2's step
  directory (`explore --case 'crash@r0:save2/open(step2/tmp*)'`): the directory
  is whole but for the file that makes it a checkpoint to OLMo-core's
  loader, the resume loads step 0, trains again and dies saving step 2 with
  `FileExistsError` on the torn directory: atomic FAIL, naming it
  (docs/findings.md).

* the same crash with `--save-overwrite`: OLMo-core loads step 0 and
  replaces step 2, atomic PASS (the harness once read that resume as a
  fresh start, docs/matrix-trainers.md).

torchtitan 0.3.0 (.venv-torchtitan, the same way): its own Trainer and
`CheckpointManager` (DCP `step-N/` directories), on CPU through the
adaptations of recipes/torchtitan/cpu.py, stopped after save 2 and resumed
(`run --case resume@2`): every check passes and the final state is
compared bitwise key by key (783 keys per rank: the model's, the
optimizer's, the lr scheduler's, the data loader's, the train state's).
3 torchrun runs, 30-110 s each on the 2-core box (169 s in all, 2026-12-07).
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
    pins = [line for name in ("requirements.txt", "requirements-nodeps.txt") if (recipe / name).exists()
            for line in (recipe / name).read_text().splitlines() if line and line[0] != "#"]
    assert pins and all("==" in p for p in pins), f"{recipe.name}: the trainer unpinned: {pins}"
    assert "torch==2.13.0" in (ROOT / "recipes" / "constraints.txt").read_text()
    # CPU adaptations live in one module, cpu.py, and the script imports it
    if (recipe / "cpu.py").exists():
        assert "import cpu" in (recipe / "train.py").read_text()


def test_launch_paths_reads_both_forms():
    readme = ("torchrun --nproc-per-node 2 recipes/x/train.py runs/ckpt --steps 8\n"
              "ckpt-harness run --script 'recipes/x/train.py {ckpt_dir} --steps 4' --nproc-per-node 2\n")
    assert launch_paths(readme) == ["recipes/x/train.py", "recipes/x/train.py"]


def olmo_harness(tmp_path: Path, command: str, script_flags: str, *options: str) -> tuple[dict, str, float]:
    return recipe_harness("olmo_core", tmp_path, command, script_flags, *options)


def recipe_harness(recipe: str, tmp_path: Path, command: str, script_flags: str,
                   *options: str) -> tuple[dict, str, float]:
    """`ckpt-harness COMMAND` of the recipe's venv on its train.py (4 steps), cold: its report, output, seconds."""
    venv = ROOT / f".venv-{recipe}"
    if not (venv / "bin" / "ckpt-harness").exists():
        pytest.skip(f"no {venv.name} (the {recipe} recipe's venv): run make trainers TRAINERS={recipe} first")
    script = f"recipes/{recipe}/train.py {{ckpt_dir}} --steps 4 {script_flags}".strip()
    report = tmp_path / "report.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    start = time.monotonic()
    done = subprocess.run(
        [str(venv / "bin" / "ckpt-harness"), *command.split(), "--script", script, "--nproc-per-node", "2",
         *options, "--cold-start", "--keep", "none", "--json", str(report)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    took = time.monotonic() - start
    assert report.exists(), done.stdout[-3000:] + done.stderr[-3000:]
    return json.loads(report.read_text()), done.stdout + done.stderr, took


#: Rank 0 killed as it opens the temporary file of `.metadata.json` in step2/,
#: which it had just renamed in from step2-tmp/: `tempfile.NamedTemporaryFile`
#: names it anew in every run, so it is addressed with its random part starred.
#: Cold from the start: a case that fails warm is run again cold anyway.
CASE = "crash@r0:save2/open(step2/tmp*)"


@pytest.mark.trainers
def test_olmo_core_as_users_configure_it_resumes_bitwise(tmp_path):
    report, out, took = olmo_harness(tmp_path, "run", "--save-overwrite", "--case", "between@1")
    print(f"took {took:.0f} s")
    verdicts = {(c["case"], c["check"]): c["verdict"] for c in report["cases"]}
    assert {k for k, v in verdicts.items() if v != "pass"} == set(), out[-4000:]
    assert [verdicts[("between@1", check)] for check in ("live", "load step", "saves after resume", "final state")] \
        == ["pass"] * 4, out[-4000:]


@pytest.mark.trainers
def test_olmo_core_has_one_writer_per_file(tmp_path):
    """OLMo-core's DCP writer opens each rank's shard file through
    `tempfile.NamedTemporaryFile(dir=...)`, which the probes once recorded as
    the directory: both ranks "wrote" it, a false single-writer FAIL."""
    report, out, took = olmo_harness(tmp_path, "scenario write-conflicts", "--save-overwrite")
    print(f"took {took:.0f} s")
    assert report["verdict"] == "pass", out[-4000:]
    assert "single-writer: PASS" in out, out[-4000:]


@pytest.mark.trainers
def test_olmo_core_save_overwrite_off_dies_on_a_torn_step_directory(tmp_path):
    report, out, took = olmo_harness(tmp_path, "explore", "", "--save", "2", "--faults", "crash", "--no-after",
                                     "--case", CASE)
    print(f"took {took:.0f} s")
    assert report["verdict"] == "fail", out[-4000:]
    assert "atomic" in out and "FileExistsError" in out, out[-4000:]


@pytest.mark.trainers
def test_olmo_core_save_overwrite_on_resumes_the_step_before_a_torn_one(tmp_path):
    """The twin: with `save_overwrite` the resume loads step 0, clears the torn
    step2/ and saves into it. No load is reported (a script), so where it
    resumed is read from its saves: its first was step 2, after a save of
    step 0 made before it trained, which it loaded (once read as a fresh start:
    a false atomic FAIL)."""
    report, out, took = olmo_harness(tmp_path, "explore", "--save-overwrite", "--save", "2", "--faults", "crash",
                                     "--no-after", "--case", CASE)
    print(f"took {took:.0f} s")
    assert report["verdict"] == "pass", out[-4000:]
    assert any(c["case"] == CASE for c in report["cases"]), out[-4000:]


@pytest.mark.trainers
@pytest.mark.parametrize("flags, verdict", [("", "pass"), ("--no-load-rng", "fail")], ids=["resumes", "no-load-rng"])
def test_megatron_core_resume_is_judged_by_what_its_dist_checkpointing_saved(tmp_path, flags, verdict):
    """Megatron-Core's writer puts each tensor into a DCP stream, not a file
    `torch.save` names: the harness once saw only `.metadata` of its saves,
    and passed a resume run with Megatron-LM's `--no-load-rng` (the dropout
    masks after it differ). Its `dist_checkpointing.save` is a save boundary
    now, handed the sharded state dict's data."""
    report, out, took = recipe_harness("megatron_core", tmp_path, "run", flags, "--case", "resume@2")
    print(f"took {took:.0f} s")
    assert report["verdict"] == verdict, out[-4000:]
    checks = {c["check"]: c for c in report["cases"] if c["case"] == "resume@2"}
    if verdict == "fail":
        assert checks["saves after resume"]["verdict"] == "fail", out[-4000:]
        assert re.search(r"keys: rng\b", out), out[-4000:]  # the RNG, beside the weights it changed
    else:  # compared key by key: the model's shards, the optimizer's, the RNG, the iteration
        compared = re.search(r"final state +PASS +bitwise equal on every rank \((\d+) keys each\)", out)
        assert compared and int(compared.group(1)) > 20, out[-4000:]


@pytest.mark.trainers
def test_torchtitan_resumes_bitwise_through_its_checkpoint_manager(tmp_path):
    """torchtitan's `CheckpointManager` writes each save with `dcp.save` (a
    save boundary of the harness), so the state compared is what it saved:
    the model, optimizer, lr scheduler, data loader and train state."""
    report, out, took = recipe_harness("torchtitan", tmp_path, "run", "", "--case", "resume@2")
    print(f"took {took:.0f} s")
    assert report["verdict"] == "pass", out[-4000:]
    checks = {c["check"]: c["verdict"] for c in report["cases"] if c["case"] == "resume@2"}
    assert checks == dict.fromkeys(("live", "load step", "saves after resume", "final state"), "pass"), out[-4000:]
    compared = re.search(r"final state +PASS +bitwise equal on every rank \((\d+) keys each\)", out)
    assert compared and int(compared.group(1)) > 100, out[-4000:]


def load_recipes_harness():
    """recipes/harness.py (`make trainers`' second half), imported from its file: recipes/ is no package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("recipes_harness", ROOT / "recipes" / "harness.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("cuda", [False, True], ids=["no-cuda", "cuda"])
def test_make_trainers_skips_a_recipe_that_needs_cuda_only_without_it(tmp_path, monkeypatch, capsys, cuda):
    """A recipe whose harness.json says `"needs": "cuda"` (LLaMA-Factory: its own resume cannot run on CPU)
    is skipped with one line naming it and why where its venv's torch sees no CUDA device, and its matrix
    runs where one is; a recipe without the field runs either way. No trainer runs: the matrix command
    is recorded, not called, and whether CUDA is present is given."""
    harness = load_recipes_harness()
    recipes = tmp_path / "recipes"
    for name, extra in (("gpu_only", {"needs": "cuda", "needs_why": "its resume dies on CPU"}), ("anywhere", {})):
        (recipes / name).mkdir(parents=True)
        (recipes / name / "harness.json").write_text(json.dumps({"script": f"{name}/train.py {{ckpt_dir}}", **extra}))
    ran = []
    monkeypatch.setattr(harness, "RECIPES", recipes)
    monkeypatch.setattr(harness, "cuda_present", lambda recipe: cuda)
    monkeypatch.setattr(harness, "versions", lambda recipe: "3.11, torch 2.13.0")
    monkeypatch.setattr(harness.subprocess, "call", lambda cmd, **kw: ran.append(cmd) or 0)
    doc = tmp_path / "matrix-trainers.md"
    assert harness.main(["gpu_only", "anywhere", "--out", str(tmp_path / "out"), "--doc", str(doc)]) == 0
    out = capsys.readouterr().out
    scripts = [cmd[cmd.index("--script") + 1] for cmd in ran]
    skipped = ("gpu_only: matrix skipped, needs CUDA (torch.cuda.is_available() is False in .venv-gpu_only): "
               "its resume dies on CPU")
    if cuda:
        assert scripts == ["gpu_only/train.py {ckpt_dir}", "anywhere/train.py {ckpt_dir}"], out
        assert "skipped" not in out
    else:
        assert scripts == ["anywhere/train.py {ckpt_dir}"], out
        assert skipped in out.splitlines(), out
        assert "Not run by `make trainers` here: needs CUDA" in doc.read_text()
    assert harness.unmet_need("anywhere", {"script": "x"}) is None
