"""`beacon.cannot_progress` and `beacon.nothing_left`: the proofs an early cut rests on, case by case."""

import math
import os

from ckpt_harness.launch.beacon import ELSEWHERE, Beacon, Slot, cannot_progress, nothing_left, read

CUT = 100.0


def slot(issued=3, waiting=0, background=0, blocked=False, gives_up_at=math.inf):
    return Slot(issued, waiting, background, blocked, gives_up_at)


def test_a_rank_waiting_for_a_collective_a_parked_rank_never_issued_cannot_progress():
    assert cannot_progress({0: slot(4, waiting=4), 1: slot(3)}, parked={1}, running={0}, cut_at=CUT)


def test_a_blocked_rank_counts_as_gone():
    assert cannot_progress({0: slot(4, waiting=4), 1: slot(3, blocked=True)}, set(), {0, 1}, CUT)


def test_what_can_still_move_is_not_cut():
    waiting = slot(4, waiting=4)
    assert not cannot_progress({0: waiting, 1: slot(4)}, {1}, {0}, CUT)  # the parked rank issued it: it may complete
    assert not cannot_progress({0: slot(4), 1: slot(3)}, {1}, {0}, CUT)  # not in a collective
    assert not cannot_progress({0: slot(4, waiting=ELSEWHERE), 1: slot(3)}, {1}, {0}, CUT)  # a subgroup
    assert not cannot_progress({0: slot(4, waiting=4, gives_up_at=CUT - 1), 1: slot(3)}, {1}, {0}, CUT)  # times out
    assert not cannot_progress({0: slot(4, waiting=4, background=1), 1: slot(3)}, {1}, {0}, CUT)  # a thread at work
    assert not cannot_progress({0: waiting, 1: slot(3, background=1)}, {1}, {0}, CUT)  # the parked one's thread
    assert not cannot_progress({0: waiting, 1: None}, {1}, {0}, CUT)  # a slot not made yet
    assert not cannot_progress({0: waiting, 1: slot(3), 2: slot(3)}, {1}, {0, 2}, CUT)  # rank 2 still runs
    assert not cannot_progress({0: waiting}, set(), {0}, CUT)  # nobody gone
    assert not cannot_progress({0: waiting, 1: slot(3)}, set(), {0}, CUT)  # rank 1 died: gloo tells rank 0


def test_a_slot_reads_back_what_the_rank_wrote(tmp_path):
    beacon = Beacon(tmp_path / "rank0.beacon")
    beacon.issue(followed=True, main=True, gives_up_at=5.0)
    beacon.issue(followed=False, main=False, gives_up_at=7.0)  # another thread, a subgroup: the main wait stands
    beacon.handed_over(+1)
    assert read(tmp_path, 0) == Slot(1, 1, 1, False, 5.0, os.getpid())
    beacon.returned()
    beacon.handed_over(-1)
    assert read(tmp_path, 0) == Slot(1, 0, 0, False, 0.0, os.getpid())
    assert read(tmp_path, 1) is None


def test_nothing_is_left_once_every_running_rank_is_blocked_for_good():
    """The ranks not running returned, raised or died: no peer is left to act."""
    assert nothing_left({0: slot(3, blocked=True), 1: slot(4)}, running={0})
    assert nothing_left({0: slot(3, blocked=True), 1: None}, running={0})  # rank 1 died before its slot


def test_something_is_left_while_a_rank_runs_or_a_thread_works():
    assert not nothing_left({0: slot(3, blocked=True), 1: slot(4, waiting=4)}, running={0, 1})  # rank 1 waits
    assert not nothing_left({0: slot(3, blocked=True, background=1), 1: slot(4)}, running={0})  # its writer
    assert not nothing_left({0: slot(3, blocked=True), 1: slot(4, background=1)}, running={0})  # a parked one's
    assert not nothing_left({0: slot(3), 1: slot(4)}, running={0})  # not blocked: it may end by itself
    assert not nothing_left({0: None, 1: slot(4)}, running={0})  # no slot yet
    assert not nothing_left({0: slot(3), 1: slot(4)}, running=set())  # nothing runs: the run has ended
