"""The bisection's search and its word on each probe, over verifications made up here (no run, no pip):
which releases it runs and in which order, what it blames, what a fix and an undecided probe do.
The real thing, tinyckpt's releases in environments under torchrun, is tests/test_upgrades.py's."""

from __future__ import annotations

from pathlib import Path

import pytest

from ckpt_harness import targets
from ckpt_harness.config import ScriptConfig
from ckpt_harness.pipeline.bisect import bisect, pinned
from ckpt_harness.report import Report
from ckpt_harness.verdict import CaseResult, Verdict

RELEASES = ("1.0", "1.1", "1.2", "1.3", "1.4", "1.5", "1.6", "1.7", "1.8")


def target():
    return targets.of(ScriptConfig(script="train.py {ckpt_dir}", pins="other==2.0 pkg==0.9"))


def verifying(verdicts: dict[str, Verdict], summary: str = "resumed from step 2"):
    """A verify whose report under release R has one resume case, `verdicts[R]` (default PASS)."""
    seen: list[str] = []

    def verify(probed, root: Path) -> Report:
        release = probed.values["pins"].split("pkg==")[1]
        seen.append(release)
        verdict = verdicts.get(release, Verdict.PASS)
        return Report("train.py", 1, [CaseResult("resume@2", "load step", verdict, summary,
                                                 repro=f"ckpt-harness run --pins pkg=={release}")])
    return verify, seen


def test_a_release_pinned_replaces_the_targets_pin_of_that_package_and_keeps_the_others():
    assert pinned(target(), "PKG", "1.3").values["pins"] == "other==2.0 PKG==1.3"


@pytest.mark.parametrize("first_bad", RELEASES[1:])
def test_the_first_changed_release_is_found_in_log2_probes_between_the_ends(first_bad, tmp_path):
    verify, seen = verifying({r: Verdict.FAIL for r in RELEASES if r >= first_bad})
    found = bisect(target(), "pkg", RELEASES, tmp_path, verify)
    assert found.culprit == first_bad, found.explain()
    assert seen[:2] == ["1.0", "1.8"] and len(seen) - 2 <= 3, seen  # 7 between the ends: at most 3 probes
    assert f"first changed release: pkg {first_bad}" in found.explain()
    assert f"repro: ckpt-harness run --pins pkg=={first_bad}" in found.explain()


def test_a_range_whose_ends_fail_alike_holds_no_change_and_runs_nothing_between(tmp_path):
    verify, seen = verifying({r: Verdict.FAIL for r in RELEASES})
    found = bisect(target(), "pkg", RELEASES, tmp_path, verify)
    assert found.culprit is None and seen == ["1.0", "1.8"], seen
    said = found.explain()
    assert "good: the reference, failing for resume@2: load step" in said, said
    assert "no change: 1.8 fails for the causes it fails for at 1.0; the releases between were not run" in said


def test_a_fix_is_a_change_found_as_a_break_is_and_said_so(tmp_path):
    """pytorch-lightning 2.4.0 resumed an end-of-epoch checkpoint one epoch short and 2.5.0 did not: a range
    whose good end fails and whose bad end passes has changed, and the first release that passes is named."""
    verify, _ = verifying({r: Verdict.FAIL for r in RELEASES if r < "1.6"})
    found = bisect(target(), "pkg", RELEASES, tmp_path, verify)
    assert found.culprit == "1.6", found.explain()
    said = found.explain()
    assert "fixed: resume@2: load step" in said and "(fails at 1.0, passes at 1.6)" in said, said


def test_the_same_failing_case_for_another_cause_is_a_change(tmp_path):
    verify, _ = verifying({r: Verdict.FAIL for r in RELEASES})

    def other_cause(probed, root):
        report = verify(probed, root)
        if probed.values["pins"].endswith(("1.7", "1.8")):
            report.results[0] = CaseResult("resume@2", "final state", Verdict.FAIL, "diverged")
        return report
    found = bisect(target(), "pkg", RELEASES, tmp_path, other_cause)
    assert found.culprit == "1.7", found.explain()


def test_an_undecided_probe_stops_the_bisection_and_blames_nothing(tmp_path):
    verify, seen = verifying({"1.8": Verdict.FAIL, "1.4": Verdict.ERROR})
    found = bisect(target(), "pkg", RELEASES, tmp_path, verify)
    assert found.culprit is None and found.stopped and "1.4 could not be judged" in found.stopped, found.explain()
    assert seen == ["1.0", "1.8", "1.4"]
