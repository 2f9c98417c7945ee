"""A run's identity is not its state (issue 64), through the CLI on a real Lightning script.

Lightning's `ModelCheckpoint(monitor=..., save_top_k=2, save_last=True)` keeps its directory, its best path and
its best models keyed by absolute path in every checkpoint, and every run of a case has a directory of its own:
compared as they are, two identical runs differ and the script is UNKNOWN, its real failures hidden. Compared
relative to the run's directory, the script resumed with ``fit(ckpt_path="last")`` passes, saying which keys
named the run; its twin that resumes the first checkpoint it lists (an older one) FAILs, naming the step it
resumed, and a path to another step still differs.
"""

import re
from pathlib import Path

import pytest

from tests.clirun import cli

SCRIPT = Path(__file__).resolve().parent / "scripts" / "lightning_train.py"

#: Real trainers under torchrun, minutes of the 2-core box: `make test-trainers` (pyproject.toml).
pytestmark = pytest.mark.trainers


def run(tmp_path, *flags: str, options: tuple[str, ...] = ()):
    pytest.importorskip("pytorch_lightning")
    return cli("run", "--script", f"{SCRIPT} {{ckpt_dir}} --steps 6 --save-every 2 --keep-best {' '.join(flags)}",
               "--nproc-per-node", "2", "--case", "resume@4", "--keep", "none", *options, cwd=tmp_path)


def test_a_checkpoint_holding_its_run_s_paths_is_judged_and_says_which(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"resume@4 +saves after resume +PASS", done.stdout), done.stdout
    assert "warning: the run's identity, not its state, compared as a placeholder: the run's checkpoint " \
           "directory in" in done.stdout, done.stdout
    assert "ModelCheckpoint{…}.best_model_path" in done.stdout, done.stdout


def test_its_twin_resuming_an_older_checkpoint_fails_naming_it(tmp_path):
    done = run(tmp_path, "--bug", "resume-kept", options=("--cold-start",))  # it fails: cold at once
    assert done.returncode == 1, done.stdout + done.stderr
    assert "the script resumed from an older checkpoint than the newest, step 2's: it saved step 4 again" \
        in done.stdout, done.stdout
    # the paths it recorded differ by the step they name, relative to the run's directory
    assert "best_model_path: '{ckpt_dir}/step_4-v1.ckpt', expected '{ckpt_dir}/step_4.ckpt'" in done.stdout
