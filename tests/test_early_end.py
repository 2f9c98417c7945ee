"""A run no rank can take further ends at once, with the cut it would have had
(`launch.beacon`); one that could still move, by its own timeout or a thread
still at work, is left to the cut. Both ways, on real gloo groups."""

import re

import pytest

from ckpt_harness.launch import GroupSpec, run_group
from ckpt_harness.launch.outcome import Cut

#: Longer than anything a test here waits when the run ends early.
GRACE = 20.0


def run(tmp_path, payload, pace, early_end=True, **kw):
    spec = GroupSpec(world_size=2, entry="tests.entries:peer_waits_for_a_parked_rank", payload=payload,
                     run_dir=tmp_path, deadline=pace(120.0), early_end=early_end, **kw)
    return run_group(spec)


@pytest.mark.parametrize("what, cut", [("raise", Cut.FAILURE), ("return", Cut.DEADLINE), ("block", Cut.BLOCKED)])
def test_a_peer_waiting_for_a_parked_or_blocked_rank_is_cut_at_once_with_the_cut_it_would_have_had(
        tmp_path, pace, what, cut):
    outcome = run(tmp_path, f"{what} barrier", pace, failure_grace=GRACE, blocked_grace=GRACE)
    waiting, gone = outcome.ranks
    assert outcome.ended_early and outcome.cut is cut and outcome.timed_out
    assert outcome.stuck_after_failure is (cut is Cut.FAILURE)
    assert waiting.status == "hung" and "barrier" in waiting.stack  # the report is as it would have been
    assert gone.status == {"raise": "failed", "return": "ok", "block": "hung"}[what]
    assert outcome.elapsed < GRACE, outcome.elapsed  # the cut itself would come GRACE after the failure or block


def test_without_early_end_the_same_run_waits_for_its_cut(tmp_path, pace):
    outcome = run(tmp_path, "raise barrier", pace, early_end=False, failure_grace=3.0)
    assert not outcome.ended_early and outcome.cut is Cut.FAILURE and outcome.elapsed >= 3.0


def test_a_wait_the_beacon_cannot_prove_endless_is_left_to_the_cut(tmp_path, pace):
    """A thread still at work (a background save writes files and issues collectives of its own)."""
    outcome = run(tmp_path, "raise background", pace, failure_grace=3.0)
    assert not outcome.ended_early and outcome.cut is Cut.FAILURE and outcome.elapsed >= 3.0


def test_a_peer_waiting_in_a_subgroup_for_a_parked_rank_is_cut_at_once_by_the_groups_own_numbers(tmp_path, pace):
    """The beacon follows the default group alone; the subgroup counts its own
    collectives (`launch.looks`): rank 0 waits in its barrier #1, which the
    rank that raised (parked) never reached."""
    outcome = run(tmp_path, "raise subgroup", pace, failure_grace=GRACE)
    waiting, raised = outcome.ranks
    assert outcome.ended_early and outcome.cut is Cut.FAILURE and "sequence numbers" in outcome.ended_why, outcome
    assert waiting.status == "hung" and "barrier" in waiting.stack and raised.status == "failed"
    assert outcome.elapsed < GRACE, outcome.elapsed


def test_a_collective_that_gives_up_by_itself_before_the_cut_is_seen_to_give_up(tmp_path, pace):
    """monitored_barrier(timeout=2 s) with the peers' grace at 20 s: the job's
    own detection of a lost peer is what a run must show, so no early cut."""
    outcome = run(tmp_path, "raise monitored", pace, failure_grace=GRACE)
    waiting, raised = outcome.ranks
    assert not outcome.ended_early and not outcome.timed_out
    assert waiting.status == "failed" and "monitored_barrier" in waiting.log_text()
    assert 2.0 <= outcome.elapsed < GRACE, outcome.elapsed


def test_a_rank_that_raised_with_its_only_peer_blocked_for_good_ends_the_run_at_once(tmp_path, pace):
    """A correct job's peer gives up on a blocked rank by its own timeout and
    raises: nothing is left to happen (`beacon.nothing_left`), so the run
    ends then, with the failure grace as its cut, as it would have been."""
    outcome = run(tmp_path, "block monitored", pace, failure_grace=GRACE)
    raised, blocked = outcome.ranks
    assert outcome.ended_early and outcome.cut is Cut.FAILURE, outcome
    assert raised.status == "failed" and "monitored_barrier" in raised.log_text()
    assert blocked.status == "hung" and "peer_waits_for_a_parked_rank" in blocked.stack
    assert outcome.elapsed < GRACE, outcome.elapsed


def test_a_rank_that_raised_with_work_still_going_in_a_thread_is_left_to_the_cut(tmp_path, pace):
    outcome = run(tmp_path, "block monitored-background", pace, failure_grace=3.0)
    assert not outcome.ended_early and outcome.cut is Cut.FAILURE and outcome.elapsed >= 3.0, outcome


def mismatched(tmp_path, pace, payload):
    spec = GroupSpec(world_size=2, entry="tests.entries:collectives_of_two_kinds", payload=payload,
                     run_dir=tmp_path, deadline=pace(120.0), failure_grace=GRACE)
    return run_group(spec)


def test_ranks_in_collectives_of_two_kinds_at_one_number_are_cut_at_once_as_a_hang(tmp_path, pace):
    """Rank 0 in all_reduce #2, rank 1 in barrier #2: gloo never matches them,
    so each would wait out its group's timeout (600 s here) and the run its
    120 s deadline; it ends within seconds, as the deadline's cut, each rank's
    stack naming its collective."""
    outcome = mismatched(tmp_path, pace, "all_reduce barrier")
    first, second = outcome.ranks
    assert outcome.ended_early and outcome.cut is Cut.DEADLINE and outcome.timed_out, outcome
    assert "collectives of different kinds" in outcome.ended_why, outcome.ended_why
    assert "all_reduce" in first.stack and "barrier" in second.stack
    assert outcome.elapsed < 20.0, outcome.elapsed  # SETTLE is 1 s: well within 5 s on an idle box


@pytest.mark.parametrize("payload", ["all_gather_object all_gather2", "all_reduce late-all_reduce"])
def test_collectives_that_match_in_part_or_late_are_not_cut(tmp_path, pace, payload):
    """An object collective against the tensor ones it is made of matches (the
    first all_gather moves both ranks on); a peer 3 s late joins its
    collective: both runs finish."""
    outcome = mismatched(tmp_path, pace, payload)
    assert not outcome.ended_early and not outcome.timed_out, outcome
    assert [r.status for r in outcome.ranks] == ["ok", "ok"], outcome


def test_a_run_that_waits_says_every_few_seconds_what_each_rank_waits_in(tmp_path, pace):
    """The heartbeat (`launch.heartbeat`): rank 0 waits in all_reduce #2 while
    rank 1 sleeps 12 s before joining it (slow, not stuck: the run finishes);
    10 s in, a line says how long the run has gone, when it will be cut, and
    where each rank is."""
    from ckpt_harness.launch import heartbeat

    lines: list[str] = []
    heartbeat.report_to(lines.append)
    try:
        outcome = mismatched(tmp_path, pace, "all_reduce late-all_reduce 12")
    finally:
        heartbeat.report_to(heartbeat.default)
    assert not outcome.ended_early and [r.status for r in outcome.ranks] == ["ok", "ok"], outcome
    assert lines, outcome
    assert re.fullmatch(r"\[ckpt_harness\] \S+/\S+: running for 1\d s, cut in \d+ s; rank 0 in all_reduce #2 for "
                        r"\d+ s, rank 1 running \(in no collective the probes see\)", lines[0]), lines


def test_a_hang_only_the_deadline_ends_is_confirmed_cold_as_soon_as_the_ranks_are_there_again(tmp_path, pace):
    """Rank 1 sleeps for good without saying so, after the barrier rank 0 then
    waits in: nothing proves that wait endless, so the run waits out its
    deadline. A run with cold starts under `cold/` in its place confirms it
    (`layout.warm_twin`, as `pipeline.confirm` places it) and ends as soon as
    its ranks are where the warm run hung, idle: the same collectives, by
    number, in the same order, the same one pending (`looks.reached`), not
    at a second deadline."""
    def spec(where, **kw):
        return GroupSpec(world_size=2, entry="tests.entries:peer_waits_for_a_parked_rank", payload="sleep barrier",
                         run_dir=tmp_path / where, **kw)

    warm = run_group(spec("run", deadline=8.0))
    assert warm.timed_out and not warm.ended_early and warm.cut is Cut.DEADLINE, warm
    cold = run_group(spec("cold/run", deadline=pace(120.0), warm_children=False))
    assert cold.ended_early and cold.cut is Cut.DEADLINE and "the same ones in the same order" in cold.ended_why, cold
    assert [r.status for r in cold.ranks] == ["hung", "hung"] and "barrier" in cold.ranks[0].stack
    assert cold.elapsed < GRACE, cold.elapsed
