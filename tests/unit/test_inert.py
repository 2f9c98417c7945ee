"""Differences judged by their consequence (`oracle.inert`): which failures are
bookkeeping to be tried by a further resume, and what that resume decides."""

from __future__ import annotations

import numpy as np

from ckpt_harness.oracle import inert, judge_same_state
from ckpt_harness.state import capture
from ckpt_harness.verdict import Verdict


def state(weight: float = 1.0, consumed: int = 4, resumes: int = 0, seed: int = 0) -> dict:
    return capture({"step_4.pt.tmp.model.weight": np.full(4, weight, np.float32),
                    "step_4.pt.tmp.loader.consumed": consumed, "step_4.pt.tmp.loader.resumes": resumes,
                    "step_4.pt.tmp.rng.seed": seed})


def compared(**actual) -> list:
    """A "saves after resume" comparison of two ranks against `state()`."""
    return [judge_same_state("resume@2", "saves after resume", {0: state(), 1: state()},
                             {0: state(**actual), 1: state(**actual)}, "save 4", None)]


def test_a_failure_in_data_position_alone_is_bookkeeping_to_try_by_its_keys_without_the_file():
    assert inert.bookkeeping(compared(resumes=1)) == ("loader.resumes",)
    assert inert.bookkeeping(compared(resumes=1, consumed=2)) == ("loader.consumed", "loader.resumes")


def test_any_other_difference_beside_it_is_judged_as_it_stands():
    assert inert.bookkeeping(compared(resumes=1, weight=2.0)) is None  # weights: training differs already
    assert inert.bookkeeping(compared(resumes=1, seed=1)) is None  # RNG changes what training draws
    assert inert.bookkeeping(compared()) is None  # nothing failed
    failed = compared(resumes=1)
    unexplained = [*failed, judge_same_state("resume@2", "final state", None, None, "final state", None)]
    assert inert.bookkeeping(unexplained) is None  # a failure with no differences to read


def test_training_that_went_on_bitwise_makes_it_a_pass_with_a_note_naming_the_keys():
    judged = inert.judge(compared(resumes=1), ("loader.resumes",), inert.Consequence(2, 4))
    assert [r.verdict for r in judged] == [Verdict.PASS]
    assert "data position bookkeeping (loader.resumes)" in judged[0].summary
    assert "resumed once more, from save 4 as a run resumed from save 2 wrote it" in judged[0].summary
    assert judged[0].note and "loader.resumes" in judged[0].note and not judged[0].differences
    assert "noted, not a failure" in judged[0].details


def test_training_that_diverged_keeps_the_failure_and_says_how():
    diverged = inert.Consequence(2, 4, "save 6 differs from the uninterrupted run's: rank 0 model.weight: ...")
    judged = inert.judge(compared(consumed=2), ("loader.consumed",), diverged)
    assert [r.verdict for r in judged] == [Verdict.FAIL] and judged[0].note is None
    assert "it changes training: resumed once more" in judged[0].summary and "save 6 differs" in judged[0].summary


def test_no_further_resume_to_try_leaves_it_undecided_saying_why():
    judged = inert.judge(compared(resumes=1), ("loader.resumes",), None, "no save after save 2 has training after it")
    assert [r.verdict for r in judged] == [Verdict.UNKNOWN]
    assert judged[0].summary.endswith("no save after save 2 has training after it")


def test_consequences_are_what_differs_but_data_position():
    assert inert.consequences({0: state()}, {0: state(consumed=2, resumes=3)}) == []
    [(rank, found)] = inert.consequences({0: state()}, {0: state(consumed=2, weight=0.5)})
    assert rank == 0 and [d.key for d in found] == ["step_4.pt.tmp.model.weight"]
