"""A save routine written inline in the training loop, and a final save
that hangs on a collective only rank 0 runs (issue 44, items 4 and 5),
through the CLI under real torchrun.

tests/scripts/inline_save.py has no save function: rank 0 writes and
renames, every rank meets in a barrier, in the loop's body. With its bug,
before the final save rank 0 alone all-reduces a metric while rank 1 waits
in the barrier that closed every earlier save: gloo never matches the two,
and each would wait out its 30-minute timeout. The harness must

* end the run within seconds of the two collectives forming, not at the
  180 s deadline (`beacon.mismatched`);
* judge it the checkpointing's failure (live FAIL), naming both call sites,
  since rank 1 waits at the call site every earlier save ran
  (`problems.save_sites`): training had finished;
* pass the twin without that collective, and keep a hang in a training
  step (the same mismatch one step earlier, outside any save) an ERROR.
"""

import time
from pathlib import Path

import pytest

from tests.clirun import cli

SCRIPT = Path(__file__).parent / "scripts" / "inline_save.py"


def run(tmp_path, bug: str = "", *more: str):
    """`ckpt-harness run` of the script; cold when a bug is planted (a case
    that does not pass would be run again cold to confirm it)."""
    started = time.monotonic()
    done = cli("run", "--script", f"{SCRIPT} {{ckpt_dir}}" + (f" --bug {bug}" if bug else ""),
               "--nproc-per-node", "2", *(("--cold-start",) if bug else ()), *more, cwd=tmp_path)
    return done, time.monotonic() - started


def test_a_final_save_that_hangs_on_a_collective_only_rank_0_runs_is_a_live_fail_in_seconds(tmp_path):
    done, took = run(tmp_path, "rank0-collective-in-final-save")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "golden  live   FAIL" in done.stdout, done.stdout
    assert "rank 0 waiting in all_reduce #15 called from inline_save.py:67" in done.stdout, done.stdout
    assert ("rank 1 waiting in barrier #15 called from inline_save.py:72 in <module>() during run, at a call site of "
            "the save routine (every earlier save ran it)") in done.stdout, done.stdout
    assert "ended at once: every rank waited in the same collective, by number, in collectives of different kinds" \
        in done.stdout, done.stdout
    assert "ckpt_harness/inject/" not in done.stdout, done.stdout  # the probes' frames are hidden in the stacks
    assert took < 120, took  # the deadline is 180 s; idle, the whole command takes ~5 s


def test_the_twin_without_that_collective_passes(tmp_path):
    done, _ = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "golden    live                PASS     golden: all ranks finished" in done.stdout, done.stdout
    assert "resume@2  final state         PASS     bitwise equal on every rank" in done.stdout, done.stdout


def test_the_same_hang_in_a_training_step_stays_an_error_of_the_script(tmp_path):
    done, _ = run(tmp_path, "rank0-collective-in-train-step")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "golden  live   ERROR    golden: the script fails with no fault armed, outside its saves and loads" \
        in done.stdout, done.stdout
    assert "at a call site of the save routine" not in done.stdout, done.stdout


@pytest.mark.parametrize("bug", ["rank0-collective-in-final-save"])
def test_without_the_save_sites_the_final_save_hang_would_be_the_scripts_error(tmp_path, bug, monkeypatch):
    """The other way: with `save_sites` finding nothing (as before it was
    built), the same run is the ERROR the issue reported, so the FAIL above
    is the call sites' doing."""
    from ckpt_harness.oracle import problems

    monkeypatch.setattr(problems, "save_sites", lambda run: set())
    done, _ = run(tmp_path, bug)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "the script fails with no fault armed, outside its saves and loads" in done.stdout, done.stdout
