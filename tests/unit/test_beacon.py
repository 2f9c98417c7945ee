"""`beacon.cannot_progress`, `beacon.nothing_left` and `beacon.mismatched`: the proofs an early cut rests on, case
by case."""

import dataclasses
import math
import os

from ckpt_harness.launch.beacon import (
    ELSEWHERE, MISMATCH, SETTLE, Beacon, Slot, cannot_progress, mismatched, nothing_left, read, why_stuck)

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
    since = beacon.since
    assert read(tmp_path, 0) == Slot(1, 1, 1, False, 5.0, os.getpid(), since, "", False)
    beacon.issue(followed=True, main=True, gives_up_at=6.0, op="all_gather_into_tensor", kinds_differ=True)
    found = read(tmp_path, 0)
    assert (found.waiting, found.op, found.kinds_differ) == (2, "all_gather_into_tensor", True)
    assert found.doing(found.since + 12) == "in all_gather_into_tensor #2 for 12 s"
    beacon.returned()
    beacon.handed_over(-1)
    assert read(tmp_path, 0) == Slot(2, 0, 0, False, 0.0, os.getpid(), 0.0, "", False)
    assert read(tmp_path, 1) is None


NOW = 1000.0


def waits(op, n=26, since=NOW - 2 * SETTLE, kinds_differ=True, **kw):
    """A rank waiting in collective `n`, an `op`, since `since`."""
    return dataclasses.replace(Slot(n, n, 0, False, math.inf, 0, since, op, kinds_differ), **kw)


def test_ranks_in_collectives_of_different_kinds_at_one_number_cannot_progress():
    slots = {0: waits("all_reduce"), 1: waits("barrier")}
    assert mismatched(slots, {0, 1}, CUT, NOW)
    assert why_stuck(slots, set(), {0, 1}, CUT, NOW) == MISMATCH
    assert mismatched({0: waits("all_reduce"), 1: waits("barrier"), 2: waits("barrier")}, {0, 1, 2}, CUT, NOW)


def test_collectives_that_may_still_match_or_end_are_not_taken_for_a_mismatch():
    def one(a, b, running=frozenset({0, 1})):
        return mismatched({0: a, 1: b}, set(running), CUT, NOW)

    assert not one(waits("all_reduce"), waits("all_reduce"))  # the same kind: slow, not stuck
    assert not one(waits("all_gather_object"), waits("all_gather"))  # an object collective starts as its tensor one
    assert not one(waits("broadcast_object_list"), waits("broadcast"))
    assert not one(waits("all_reduce"), waits("barrier", n=27))  # other numbers: not proven
    assert not one(waits("all_reduce"), waits("barrier", since=NOW - SETTLE / 2))  # just formed
    assert not one(waits("all_reduce", kinds_differ=False), waits("barrier", kinds_differ=False))  # NCCL
    assert not one(waits("all_reduce", gives_up_at=CUT - 1), waits("barrier"))  # gives up by itself first
    assert not one(waits("all_reduce", background=1), waits("barrier"))  # a thread at work
    assert not one(waits("all_reduce", blocked=True), waits("barrier"))  # blocked: `cannot_progress`'s
    assert not one(waits("all_reduce"), Slot(26, 0, 0, False, 0.0))  # rank 1 not in a collective
    assert not one(waits("all_reduce"), None)  # no slot yet
    assert not one(waits("all_reduce"), waits("barrier"), running={0})  # rank 1 parked: not every rank waits
    assert not one(waits("all_reduce", waiting=ELSEWHERE), waits("barrier"))  # a subgroup


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
