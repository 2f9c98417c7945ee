"""`run --flake N` (issue 44 item 6): the uninterrupted run N times, each
judged, to expose a race that passes a single run. Through the CLI.

`EveryRankRepublishesLatest` (tests/planted/jobs.py) has every rank write
`latest` again through one temporary name, ranks a few milliseconds apart:
about a third of its runs lose the race (a rank's rename finds nothing),
the rest pass; its twin has rank 0 alone write it.
"""

import re

from tests.clirun import cli

PLANTED = "tests.planted.jobs"


def test_flake_flags_a_race_that_passes_single_runs_and_names_the_runs_it_failed(tmp_path):
    done = cli("run", "--job", f"{PLANTED}:EveryRankRepublishesLatest", "--flake", "25", "--case", "golden",
               cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    found = re.search(r"^flake +live +FAIL +(\d+) of 25 fault-free runs did not pass \((golden#?\d*(, )?)+",
                      done.stdout, re.M)
    assert found, done.stdout
    failed = int(found.group(1))
    # some runs pass, so a single run may well pass; at 1/3 of runs failing, none of 25 failing is a
    # chance of 4e-5 and all 25 of 1e-12
    assert 0 < failed < 25, done.stdout
    assert re.search(r"^golden#\d+ +live +FAIL +run \d+ of 25: failure.*FileNotFoundError in save \d", done.stdout,
                     re.M), done.stdout
    assert "--flake 25" in done.stdout  # the repro line runs the same number of runs


def test_its_fixed_twin_passes_every_run(tmp_path):
    done = cli("run", "--job", f"{PLANTED}:RankZeroRepublishesLatest", "--flake", "25", "--case", "golden",
               cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^flake +live +PASS +25 fault-free runs: every one finished and saved", done.stdout, re.M)


def test_flake_takes_two_runs_or_more(tmp_path):
    done = cli("run", "--job", "torch_save", "--flake", "1", cwd=tmp_path)
    assert done.returncode == 2 and "--flake" in done.stderr, done.stderr
