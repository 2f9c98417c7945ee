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

The module is the loop here, so the module (`<module>`) is never a save
routine by its name (issue 64, `problems.save_routines`): a rank that
raises in a training step, before the first save (no optimizer step seen
yet, so nothing said the module trains) or between saves, is the script's
ERROR; a rank that raises in the inline save (its phase) is a FAIL, as is
the hang above (the call site of every earlier save).
"""

import re
import time
from pathlib import Path

import pytest

from tests.clirun import cli

SCRIPT = Path(__file__).parent / "scripts" / "inline_save.py"


def line_of(code: str) -> int:
    """The script's line holding `code` (the one line that does)."""
    (found,) = [n for n, line in enumerate(SCRIPT.read_text().splitlines(), 1) if code in line]
    return found


#: The line of rank 0's lone all-reduce before the final save, and of the barrier that closes every save.
LONE_ALL_REDUCE = line_of("# a metric for the final log line")
SAVE_BARRIER = line_of("# closes the save")


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
    assert f"rank 0 waiting in all_reduce #15 called from inline_save.py:{LONE_ALL_REDUCE}" in done.stdout, done.stdout
    assert (f"rank 1 waiting in barrier #15 called from inline_save.py:{SAVE_BARRIER} in <module>() during run, at a "
            "call site of the save routine (every earlier save ran it)") in done.stdout, done.stdout
    assert "ended at once: every rank waited in the same collective, by number, in collectives of different kinds" \
        in done.stdout, done.stdout
    assert "ckpt_harness/inject/" not in done.stdout, done.stdout  # the probes' frames are hidden in the stacks
    assert took < 120, took  # the deadline is 180 s; idle, the whole command takes ~5 s


def test_the_twin_without_that_collective_passes(tmp_path):
    done, _ = run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"golden +live +PASS +golden: all ranks finished", done.stdout), done.stdout
    assert re.search(r"resume@2 +final state +PASS +bitwise equal on every rank", done.stdout), done.stdout
    # and stopped between its saves, after step 3, it resumes from save 2
    assert re.search(r"between@3 +load step +PASS +stopped after step 3, resumed from save 2: 1 step lost",
                     done.stdout), done.stdout


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


# -- issue 64: the loop is the module ------------------------------------------------------------------
def cold_run(tmp_path_factory, name: str, *script_args: str):
    """`ckpt-harness run --cold-start` of the script with `script_args`, its
    work directory kept (the runs' traces): (result, workdir). Each of
    these fails, so cold at once: one run, not a warm one confirmed cold."""
    base = tmp_path_factory.mktemp(name)
    done = cli("run", "--script", " ".join((f"{SCRIPT} {{ckpt_dir}}", *script_args)), "--nproc-per-node", "2",
               "--cold-start", "--workdir", str(base / "work"), cwd=base)
    return done, base / "work"


@pytest.fixture(scope="module")
def first_step_crash(tmp_path_factory):
    """Rank 1 raises in training step 1: before any save and any optimizer step."""
    return cold_run(tmp_path_factory, "first-step", "--raise-in-step", "1")


def test_a_crash_in_the_first_training_step_of_a_module_level_loop_is_an_error(first_step_crash):
    done, _ = first_step_crash
    assert done.returncode == 3, done.stdout + done.stderr
    assert "golden  live   ERROR    golden: the script fails with no fault armed, before its first save" \
        in done.stdout, done.stdout
    assert "rank 1 raised RuntimeError in run: rank 1 fails in training step 1" in done.stdout, done.stdout
    assert "save routine" not in done.stdout, done.stdout  # was "in the save routine <module>()": a live FAIL


def test_the_module_is_no_save_routine_by_name_though_nothing_said_it_trains(first_step_crash):
    """Both ways, on that run's own trace: its checkpoint I/O (the `mkdir` of
    the directory) was made in `<module>` on every rank and no rank made an
    optimizer step, so by name alone (the rule before issue 64: the functions
    of its I/O, less those that train) the module was the save routine but
    for the first forward that says it trains; `save_routines` leaves it
    out by name too, and the generator
    expression that lists the directory for the newest checkpoint (every
    generator expression of the file is `<genexpr>`) with it."""
    from ckpt_harness.inject.trace import EventKind
    from ckpt_harness.oracle import problems
    from ckpt_harness.records import read_events

    _, work = first_step_crash
    events = [e for rank in (0, 1) for e in read_events(work / "golden" / "run", rank)]
    module = f"{SCRIPT}:<module>"
    assert {e.rank for e in events if e.fields.get("routine") == module} == {0, 1}
    assert not [e for e in events if e.kind is EventKind.SAVES]
    # its first module forward, before the step that raised, says the module trains (`Saves.watch_first_forward`)
    assert module in {f for e in events if e.kind is EventKind.TRAINS for f in e.fields.get("functions", ())}

    class Traced:  # what `save_routines` reads of a run
        def events(self):
            return events

    made = {e.fields["routine"] for e in events if e.fields.get("routine")}
    assert {module, f"{SCRIPT}:<genexpr>"} <= made  # by name alone, the module and the listing
    assert problems.save_routines(Traced()) == set()


def test_a_crash_in_a_training_step_between_saves_is_an_error(tmp_path_factory):
    done, _ = cold_run(tmp_path_factory, "between-saves", "--raise-in-step", "3")
    assert done.returncode == 3, done.stdout + done.stderr
    assert "golden  live   ERROR    golden: the script fails with no fault armed, outside its saves and loads" \
        in done.stdout, done.stdout
    assert "rank 1 raised RuntimeError in run: rank 1 fails in training step 3" in done.stdout, done.stdout
    assert "save routine" not in done.stdout, done.stdout


def test_an_inline_save_that_raises_is_a_fail(tmp_path_factory):
    """Rank 0's rename of a name it never wrote, in the loop's body, right
    after its `torch.save`: in the save (its phase lasts until the script
    trains again), whatever the function's name."""
    done, _ = cold_run(tmp_path_factory, "rename-raises", "--bug", "rank0-rename-raises")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "golden  live   FAIL     golden: failure: rank 0 raised FileNotFoundError in save 2" in done.stdout, \
        done.stdout
