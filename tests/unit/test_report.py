"""An exploration's failures, grouped by cause as a person reads them."""

from __future__ import annotations

from ckpt_harness.report import Report
from ckpt_harness.verdict import CaseResult, Verdict


def case(name, op, check="live", outcome="S_prev", why="the error did not reach every rank: rank 0 raised"):
    rank, index = name.split("@r")[1].split(":")[0], name.split("#")[1]
    step = 2 if outcome == "S_prev" else 4
    return CaseResult(name, check, Verdict.FAIL, f"error at rank {rank} #{index} {op} x → {outcome} (step {step}); "
                      f"{why} in save 4", f"details of {name}", f"repro {name}",
                      (rank, index, op, "x", "", "error", outcome))


def test_failures_of_one_cause_are_shown_once_with_their_count_an_example_and_the_usual_fix():
    failures = [case(f"error@r0:save4#{i}", "write") for i in range(12)] + [
        case("error@r1:save4#3", "fsync"),
        case("error@r0:save4#99", "write", check="preserving", outcome="fresh start", why="expected S_k or S_prev"),
    ]
    passed = CaseResult("error@r0:save4#100", "preserving", Verdict.PASS, "→ S_prev", cells=("0",) * 7)
    report = Report("job", 2, [*failures, passed], kind="explore")
    text = report.explain()
    assert text.count("=== ") == 3
    assert ("=== finding 1 of 3: live FAIL, 12 cases\n"
            "S_prev after error at write: the error did not reach every rank") in text
    assert "--- error@r0:save4#0 / live" in text and "--- error@r0:save4#1 / live" not in text  # one example
    assert "repro error@r0:save4#0" in text and "details of error@r0:save4#0" in text
    assert ("its other cases: error@r0:save4#1, error@r0:save4#2, error@r0:save4#3, error@r0:save4#4, "
            "error@r0:save4#5, error@r0:save4#6, error@r0:save4#7, error@r0:save4#8 and 3 more") in text
    assert ": live FAIL, 1 case\nS_prev after error at fsync" in text  # another operation, another group
    assert text.count("usual fix: hand a rank's error to every rank") == 1  # once per property
    assert ": preserving FAIL, 1 case\nfresh start after error at write: expected S_k or S_prev" in text
    assert "usual fix: never delete or overwrite the previous checkpoint" in text
    every = report.explain(every=True)
    assert all(f"--- {f.case} / {f.check}" in every for f in failures) and "=== " not in every


def test_a_peer_left_waiting_for_a_blocked_rank_gets_the_timeout_fix_not_the_errors():
    """A hang raises nothing for a rank to hand on, and no worker exits for torchrun to see: only a timeout on
    what the peers wait in ends them."""
    hung = CaseResult("hang@r0:save4/rename(a->b)", "live", Verdict.FAIL, "rank 1 waited for good", "d", "repro",
                      ("0", "61", "rename", "a -> b", "", "hang", "S_prev"))
    text = Report("job", 2, [hung], kind="explore").explain()
    assert "usual fix: give the waits of a save a timeout" in text and "hand a rank's error" not in text, text
