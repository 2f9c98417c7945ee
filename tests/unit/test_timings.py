"""Where a run's and a case's seconds go, derived from hand-built records: the launcher's moments and the
ranks' phase changes (`records.runs.run_breakdown`, `pipeline.clock.CaseClock`), no process."""

from __future__ import annotations

import time

import pytest

from ckpt_harness import phase
from ckpt_harness.inject.trace import Event
from ckpt_harness.records.runs import run_breakdown
from ckpt_harness.pipeline.clock import CaseClock
from ckpt_harness.verdict import Breakdown
from tests.unit.synthetic import rank, run

T0 = 1000.0  # a monotonic clock's value: the launcher's and the ranks' are one


def phases(r: int, *changes: tuple[float, str], process: str = ""):
    """Rank `r` entering each phase at T0 + seconds."""
    builder = rank(r)
    for at, name in changes:
        fields = {"process": process} if process else {}
        builder.events.append(Event.parse({"kind": "phase", "rank": r, "phase": name, "t": T0 + at, **fields}))
    return builder


def stamped(*ranks, requested=0.0, started=0.5, troubled=None, decided=None, ended=None):
    made = run(*ranks)
    o = made.outcome
    o.requested_at, o.started_at, o.decided_at, o.ended_at = T0 + requested, T0 + started, T0 + decided, T0 + ended
    o.troubled_at = None if troubled is None else T0 + troubled
    return made


LIFE = ((1.0, "setup"), (2.0, "load"), (2.5, "state after load"), (3.0, "train_step 1"), (4.0, "train_step 2"),
        (5.0, "save 2"), (6.0, "state after save 2"), (6.5, "train_step 3"), (7.0, "save 4"),
        (8.0, "state after save 4"))


def test_a_clean_run_is_cut_into_launch_work_and_teardown():
    split = run_breakdown(stamped(phases(0, *LIFE), phases(1, *LIFE), decided=9.0, ended=9.5), broken=4)
    assert split == Breakdown(launch=0.5, start=0.5, setup=2.0, train=2.5, saves=1.5, faulted_save=2.0, waits=0.0,
                              teardown=0.5, wall=9.5)
    assert split.unaccounted == pytest.approx(0.0)


def test_the_save_not_broken_counts_among_the_saves():
    split = run_breakdown(stamped(phases(0, *LIFE), decided=9.0, ended=9.5), broken=None)
    assert (split.saves, split.faulted_save) == (3.5, 0.0)


def test_after_trouble_the_launcher_waits():
    """A rank blocked at 7.5: the rest of the run, to the blocked grace's cut at 10.5, is waiting; the stacks
    and the kill are the teardown. The ranks' phases stop counting at the trouble."""
    split = run_breakdown(stamped(phases(0, *LIFE), phases(1, *LIFE), troubled=7.5, decided=10.5, ended=12.0),
                          broken=4)
    assert (split.faulted_save, split.waits, split.teardown) == (0.5, 3.0, 1.5)
    assert split.unaccounted == pytest.approx(0.0)


def test_ranks_are_averaged_and_clamped_to_the_window():
    """Rank 1 is slower to start; an event before the ranks were all started counts from the start."""
    late = phases(1, (1.5, "setup"), (5.0, "train_step 1"))
    split = run_breakdown(stamped(phases(0, (0.1, "setup"), (3.0, "train_step 1")), late, decided=6.0, ended=6.0))
    assert split.start == pytest.approx((0.0 + (1.5 - 0.5)) / 2)
    assert split.setup == pytest.approx(((3.0 - 0.5) + (5.0 - 1.5)) / 2)
    assert split.train == pytest.approx((3.0 + 1.0) / 2)


def test_a_spawned_processes_phases_are_its_ranks():
    """DCP's checkpoint process enters "save 4" while its rank trains on: the rank's time is training."""
    made = phases(0, (1.0, "train_step 5"))
    made.events += phases(0, (2.0, "save 4"), process="checkpoint process").events
    split = run_breakdown(stamped(made, started=0.0, decided=4.0, ended=4.0), broken=4)
    assert (split.train, split.faulted_save) == (3.0, 0.0)


def test_an_owned_loop_is_set_up_until_its_first_step():
    made = phases(0, (0.0, "run"), (1.0, "setup"), (2.0, "load"), (3.0, "train_step 1"), (4.0, "run"))
    split = run_breakdown(stamped(made, started=0.0, decided=5.0, ended=5.0))
    assert (split.start, split.setup, split.train) == (0.0, 3.0, 2.0)


def test_a_launcher_that_keeps_no_moments_gives_none():
    assert run_breakdown(run(phases(0, *LIFE))) is None


def test_save_work_names_the_step_of_a_save_and_what_follows_it():
    assert [phase.save_work(p) for p in ("save 4", "bg_save 4", "state after save 4", "after_save 4",
                                         "train_step 4", "state after load", "final state")] == \
        [4, 4, 4, 4, None, None, None]


def test_a_case_adds_its_runs_to_the_harness_time_around_them():
    clock = CaseClock()
    clock.started = time.monotonic() - 20.0  # the case began 20 s ago
    clock.run(lambda: stamped(phases(0, *LIFE), decided=9.0, ended=9.5), broken=4)
    clock.run(lambda: stamped(phases(0, *LIFE), decided=3.0, ended=3.5), resume=True)
    clock.judged_from = time.monotonic() - 1.0
    case = clock.done()
    assert (case.fault_run, case.resume_run) == (9.5, 3.5)
    assert case.launch == 1.0 and case.judging == pytest.approx(1.0, abs=0.1)
    assert case.harness == pytest.approx(20.0 - 13.0 - 1.0, abs=0.1)
    assert sum(case.parts().values()) == pytest.approx(case.wall)


def test_means_and_json():
    a, b = Breakdown(launch=1.0, wall=2.0, harness=1.0), Breakdown(launch=3.0, wall=4.0, harness=1.0)
    assert Breakdown.mean([a, b]) == Breakdown(launch=2.0, wall=3.0, harness=1.0)
    assert Breakdown.mean([]) == Breakdown()
    js = a.to_json()
    assert js["wall"] == 2.0 and list(js["parts"]) == list(Breakdown.PARTS) and js["parts"]["launch"] == 1.0
    assert js["stages"] == {"fault_run": 0.0, "resume_run": 0.0}
