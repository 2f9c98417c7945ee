"""Upgrade-safe (issue 67): a checkpoint written under one release of a package, resumed under the next.

The releases are tinyckpt's (tests/tinypkgs.py), wheels written by hand and installed offline
(``--find-links DIR`` with ``PIP_NO_INDEX=1``) into environments the harness makes and caches
(`launch.envs`); the script, tests/scripts/tiny_upgrade.py, is plain DDP saving through tinyckpt. Case
upgrade@2 stops after save 2 under ``--upgrade-from`` and resumes under ``--pins``: a good release after
a good one passes; 2.0.0, which loads a 1.x checkpoint without its optimizer and says nothing, fails,
naming the optimizer's keys; 3.0.0, which refuses a 1.x checkpoint on every rank, naming its format,
passes. Through the CLI, as a user runs it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests import tinypkgs
from tests.clirun import cli

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "tests" / "scripts" / "tiny_upgrade.py"


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    """The wheels, a cache of environments, and pip kept off the index and inside the test's directories."""
    wheels = tinypkgs.build(tmp_path_factory.mktemp("wheels"), ["1.0.0", "1.1.0", "2.0.0", "3.0.0"])
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PIP_NO_INDEX", "1")
        mp.setenv("PIP_CACHE_DIR", str(tmp_path_factory.mktemp("pip-cache")))
        mp.setenv("PIP_CONFIG_FILE", os.devnull)
        for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL"):
            mp.delenv(name, raising=False)
        yield ["--find-links", str(wheels), "--envs-dir", str(tmp_path_factory.mktemp("envs"))]


def upgrade(offline, cwd: Path, old: str, new: str):
    return cli("run", "--script", f"{SCRIPT} {{ckpt_dir}} --steps 4 --save-every 2", "--nproc-per-node", "2",
               "--upgrade-from", f"tinyckpt=={old}", "--pins", f"tinyckpt=={new}", *offline, "--case", "upgrade@2",
               cwd=cwd)


def test_a_checkpoint_of_a_good_release_resumes_bitwise_under_the_next(offline, tmp_path):
    done = upgrade(offline, tmp_path, "1.0.0", "1.1.0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "upgrade@2" in done.stdout and "PASS" in done.stdout, done.stdout


def test_a_release_that_loads_the_old_format_in_part_fails_naming_what_it_dropped(offline, tmp_path):
    done = upgrade(offline, tmp_path, "1.0.0", "2.0.0")
    assert done.returncode == 1, done.stdout + done.stderr
    failed = [line for line in done.stdout.splitlines() if "upgrade@2" in line and "FAIL" in line]
    assert failed, done.stdout
    assert "optimizer" in done.stdout, done.stdout


def test_a_release_that_refuses_the_old_format_on_every_rank_passes_saying_so(offline, tmp_path):
    done = upgrade(offline, tmp_path, "1.0.0", "3.0.0")
    assert done.returncode == 0, done.stdout + done.stderr
    refused = [line for line in done.stdout.splitlines() if "upgrade@2" in line and "refused" in line]
    assert refused and "PASS" in refused[0], done.stdout
    assert "rank 0, 1: ValueError" in refused[0], refused[0]
