"""Stops anywhere (issue 64, item 5): a preemption between saves, after a step that wrote nothing.

Case between@K stops a script's run where its optimizer step K+1 would
start (K made, counted on its main thread) and resumes the same command on
the same directory. tests/scripts/file_saves.py --from-latest resumes from
what ``latest.json`` names; with --bug stale-latest that pointer is
refreshed on every other save only, so a run stopped after step 5, save 4
complete, resumes from save 2: a FAIL naming both. Its twin, which
refreshes it on every save, resumes from save 4 and loses one step.
One case each (`--case`), on the CLI in this process.
"""

import re
from pathlib import Path

import pytest

from tests.clirun import cli

SCRIPT = Path(__file__).resolve().parent / "scripts" / "file_saves.py"


def command(*flags: str) -> str:
    return " ".join([str(SCRIPT), "{ckpt_dir}", "--steps", "6", "--apis", "file", "--from-latest", *flags])


@pytest.fixture(scope="module")
def stale(tmp_path_factory):
    """The planted pointer, a cold start so that its FAIL is not run again to
    confirm it, and one rank: a cold worker is a fresh interpreter (the twin
    stops two ranks, each at its own step)."""
    where = tmp_path_factory.mktemp("stale-latest")
    return cli("run", "--script", command("--bug", "stale-latest"), "--nproc-per-node", "1", "--case", "between@5",
               "--cold-start", "--keep", "none", cwd=where)


def test_a_latest_pointer_that_some_save_left_stale_resumes_an_older_save_and_fails_naming_both(stale):
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert re.search(r"between@5 +load step +FAIL +stopped after step 5, the script resumed from save 2, though "
                     r"save 4 was complete when it stopped: 3 steps lost, not 1", stale.stdout), stale.stdout
    # it made save 4 again, bitwise as the uninterrupted run did, then save 6: only where it started is wrong
    assert re.search(r"between@5 +saves after resume +PASS +save 6 bitwise", stale.stdout), stale.stdout
    assert "--case between@5" in stale.stdout  # the repro line replays the one case


def test_its_twin_that_refreshes_the_pointer_on_every_save_loses_one_step(tmp_path):
    twin = cli("run", "--script", command(), "--nproc-per-node", "2", "--case", "between@5", "--keep", "none",
               cwd=tmp_path)
    assert twin.returncode == 0, twin.stdout + twin.stderr
    assert re.search(r"between@5 +load step +PASS +stopped after step 5, resumed from save 4: 1 step lost",
                     twin.stdout), twin.stdout
    assert re.search(r"between@5 +saves after resume +PASS +save 6 bitwise", twin.stdout), twin.stdout


def test_a_step_between_saves_is_named_by_the_optimizer_steps_and_a_job_has_none(tmp_path):
    """Refused before any run: a Job's run stops only at its saves."""
    job = cli("run", "--job", "torch_save", "--case", "between@3", cwd=tmp_path)
    said = "between@K: a Job's run is stopped only right after one of its saves"
    assert job.returncode == 2 and said in job.stderr, job.stdout + job.stderr
    na = cli("scenario", "stop-between-saves", "--job", "torch_save", cwd=tmp_path)
    assert na.returncode == 0 and "N/A" in na.stdout and "stopped only right after one of its saves" in na.stdout, \
        na.stdout + na.stderr
