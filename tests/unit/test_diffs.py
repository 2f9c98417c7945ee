"""Folded state differences: what a person reads when a resume is not bitwise."""

from __future__ import annotations

import numpy as np

from ckpt_harness.oracle import diffs, float_noise, judge_same_state
from ckpt_harness.report import Report
from ckpt_harness.state import capture, diff
from ckpt_harness.verdict import Verdict

RANKS = 4


def trained(rank: int, optimizer: bool = True, shift: float = 0.0, seed: int = 0) -> dict:
    """A model and an Adam-like optimizer with many keys, as a DDP job records it."""
    model = {f"model/{i}.{p}": np.full(4, i + shift, np.float32) for i in range(3) for p in ("weight", "bias")}
    optim = {f"optim/{i}.{p}/{s}": np.full(4, i, np.float32)
             for i in range(3) for p in ("weight", "bias") for s in ("exp_avg", "exp_avg_sq", "step")}
    return capture({**model, **(optim if optimizer else {}), "rng/seed": rank + seed})


def forgotten_optimizer() -> list[tuple[int, list]]:
    return [(r, diff(trained(r), trained(r, optimizer=False))) for r in range(RANKS)]


def test_a_forgotten_optimizer_is_one_line_for_all_ranks():
    listing = diffs.listing(forgotten_optimizer())
    assert listing.splitlines() == ["ranks 0-3:", "  optim/* (18 keys): missing"]
    # the lead line names keys, never a `*`
    assert diffs.summary(forgotten_optimizer()) == \
        "ranks 0-3 optim/0.bias/exp_avg, optim/0.bias/exp_avg_sq (+16 more): missing"


def test_values_fold_with_their_largest_difference():
    problems = [(r, diff(trained(r), trained(r, shift=0.5 * (1 + r % 2)))) for r in range(RANKS)]
    lines = diffs.listing(problems).splitlines()
    assert lines == ["ranks 0, 2:", "  model/* (6 keys): values differ, max abs diff 0.5",
                     "ranks 1, 3:", "  model/* (6 keys): values differ, max abs diff 1"]


def test_few_keys_and_rank_specific_values_stay_listed_one_by_one():
    problems = [(r, diff(trained(r), trained(r, seed=10))) for r in range(2)]
    assert diffs.listing(problems).splitlines() == [
        "rank 0:", "  rng/seed: 10, expected 0", "rank 1:", "  rng/seed: 11, expected 1"]
    assert diffs.summary(problems) == "rank 0 rng/seed: 10, expected 0"


def test_the_lead_line_names_the_most_severe_keys_first_not_the_file_they_were_saved_in():
    """A script's keys all start with the file they went to: folded by it,
    the lead read ``rank 0 step_4.* (8 keys): values differ``. It names the
    worst keys (model and optimizer values before counters) instead."""
    def saved(momentum: float, count: int) -> dict:
        return capture({"step_4.pt": {"model": {"0.weight": np.ones(4, np.float32), "0.bias": np.ones(2, np.float32)},
                                      "optimizer": {"state": {"0": {"momentum_buffer": np.full(4, momentum,
                                                                                               np.float32)}}},
                                      "scheduler": {"_step_count": count}}})
    problems = [(0, diff(saved(0.5, 5), saved(0.0, 1)))]
    assert diffs.summary(problems) == ("rank 0 step_4.pt.optimizer.state.0.momentum_buffer: 4 of 4 elements differ; "
                                       "first at index [0]: 0.0, expected 0.5; max abs diff 0.5 "
                                       "(and 1 more keys: counters)")
    listing = diffs.listing(problems)  # folded under what the keys are, not the file all of them went to
    assert "step_4.pt.* (" not in listing and "step_4.pt.optimizer.state.0.momentum_buffer" in listing, listing


def test_ranks_label():
    assert diffs.ranks_label([2]) == "rank 2"
    assert diffs.ranks_label([0, 1, 2, 3]) == "ranks 0-3"
    assert diffs.ranks_label([0, 2, 5, 6, 7]) == "ranks 0, 2, 5-7"


def test_a_report_does_not_repeat_the_same_differences():
    expected = {r: trained(r) for r in range(RANKS)}
    actual = {r: trained(r, optimizer=False) for r in range(RANKS)}
    after_load = judge_same_state("resume@8", "state after load", expected, actual, "state after load", "REPRO")
    final = judge_same_state("resume@8", "final state", expected, actual, "final state", "REPRO")
    assert after_load.verdict is final.verdict is Verdict.FAIL
    text = Report("job", RANKS, [after_load, final]).explain()
    assert text.count("\n  optim/* (18 keys): missing") == 1  # listed once; each summary still names it
    assert "(the same differences as resume@8 / state after load above)" in text
    assert len(text.splitlines()) < 15, text


# -- float noise after a bitwise load --------------------------------------------------------
def final_states(shift: float = 0.0, dtype=np.float32) -> dict:
    return {r: capture({"model/w": np.array([0.25, -1.5, 3.0], dtype) + np.asarray(shift, dtype), "step": 8})
            for r in range(3)}


def judged_final(actual: dict, loaded_bitwise: bool = True):
    expected = final_states()
    result = judge_same_state("resume@2", "final state", expected, actual, "final state", "REPRO")
    return float_noise(result, expected, actual, loaded_bitwise=loaded_bitwise)


def test_last_bit_drift_after_a_bitwise_load_is_unknown_with_the_ddp_note():
    result = judged_final(final_states(shift=np.float32(3.0) * np.finfo(np.float32).eps))
    assert result.verdict is Verdict.UNKNOWN
    assert result.summary.startswith("(float noise after a bitwise resume, at most ")
    assert "find_unused_parameters=True" in result.details and "rebuilds its gradient buckets" in result.details


def test_real_differences_stay_failures():
    assert judged_final(final_states(shift=1e-3)).verdict is Verdict.FAIL  # a lost state moves values far more
    drift = final_states(shift=np.float32(3.0) * np.finfo(np.float32).eps)
    assert judged_final(drift, loaded_bitwise=False).verdict is Verdict.FAIL  # the load was wrong already
    steps = {r: capture({"model/w": np.array([0.25, -1.5, 3.0], np.float32), "step": 7}) for r in range(3)}
    assert judged_final(steps).verdict is Verdict.FAIL  # an integer is never noise
    ints = {r: capture({"model/w": np.array([1, 2, 4], np.int64), "step": 8}) for r in range(3)}
    assert judged_final(ints).verdict is Verdict.FAIL
    assert judged_final(final_states()).verdict is Verdict.PASS


def test_relative_difference_is_against_the_largest_expected_value():
    (d,) = diff(capture({"w": np.array([0.0, 4.0], np.float32)}), capture({"w": np.array([1e-6, 4.0], np.float32)}))
    assert d.max_rel is not None and abs(d.max_rel - 1e-6 / 4) < 1e-9


def test_keys_of_one_leaf_name_that_differ_alike_keep_their_own_line():
    """An optimizer that took one step too many: every `step` is 5.0 where 4.0 was expected."""
    def adam(step: float, drift: float) -> dict:
        return capture({f"optim/{i}.{p}/{s}": np.full(1 if s == "step" else 4, step if s == "step" else i + drift,
                                                      np.float32)
                        for i in range(3) for p in ("weight", "bias") for s in ("exp_avg", "step")})

    (block,) = diffs.fold([(0, diff(adam(4.0, 0.0), adam(5.0, 0.5)))])
    assert [line.text for line in block.lines] == [
        "optim/*/step (6 keys): 1 of 1 elements differ; first at index [0]: 5.0, expected 4.0; max abs diff 1",
        "optim/*/exp_avg (6 keys): values differ, max abs diff 0.5",  # the rest: one leaf name too
    ]
