"""Where a case's seconds go, on real runs: the parts of each case add up to its wall time, an injected
hang's blocked grace and an injected error's failure grace show as waits (and shrink when the run is ended
early), and --json carries it all."""

from __future__ import annotations

import pytest

from ckpt_harness.launch import group
from ckpt_harness.pipeline.explore import explore
from ckpt_harness.pipeline.verify import verify
from ckpt_harness.targets import PROPAGATION
from ckpt_harness.verdict import Breakdown

#: torch_save's rank 1 waits in the save's barrier for a rank 0 that raised before it: the failure grace
#: (PROPAGATION in a case) cuts the run, at its directory's mkdir on rank 0.
ERROR, HANG = "error@r0:save4/mkdir(step_000004)", "hang@r0:save4/mkdir(step_000004)"
HANG_TIMEOUT = 1.5


def assert_adds_up(timings: Breakdown) -> None:
    parts = timings.parts()
    assert all(seconds >= 0 for seconds in parts.values()), parts
    assert sum(parts.values()) == pytest.approx(timings.wall, abs=0.01), parts
    for name in ("launch", "start", "setup", "train", "teardown"):  # every run has them
        assert parts[name] > 0, parts
    assert timings.fault_run > 0
    assert timings.fault_run + timings.resume_run <= timings.wall


def test_a_case_shows_its_waits_and_adds_up(tmp_path, pace, monkeypatch):
    monkeypatch.setattr(group, "EARLY_END", False)  # each stuck run waits out its grace
    report = explore("torch_save", world_size=2, workdir=tmp_path, cases=[ERROR, HANG], parallel=1,
                     hang_timeout=HANG_TIMEOUT, corruptions=())
    by_case = {r.case: r for r in report.results}
    assert set(by_case) == {ERROR, HANG}, report.table()
    for result in by_case.values():
        assert_adds_up(result.timings)
    # one case at a time: the cases' wall times fit in the exploration's, which also made the golden run
    assert sum(r.timings.wall for r in report.results) < report.elapsed

    hang = by_case[HANG].timings
    assert HANG_TIMEOUT <= hang.waits <= HANG_TIMEOUT + pace(0.5), hang
    error = by_case[ERROR].timings
    assert PROPAGATION <= error.waits <= PROPAGATION + pace(0.5), error
    assert error.resume_run > 0 or by_case[ERROR].shares is not None

    cases = {c["case"]: c for c in report.to_json()["cases"]}
    js = cases[HANG]["timings"]
    assert js["parts"]["waits"] == pytest.approx(hang.waits, abs=0.001)
    assert sum(js["parts"].values()) == pytest.approx(js["wall"], abs=0.01)
    assert set(js["stages"]) == {"fault_run", "resume_run"}


def test_a_run_ended_early_waits_less(tmp_path):
    """The same cases with runs cut once no rank can progress (`launch.beacon`): the waits are what it took back."""
    report = explore("torch_save", world_size=2, workdir=tmp_path, cases=[ERROR, HANG], parallel=1,
                     hang_timeout=HANG_TIMEOUT, corruptions=())
    by_case = {r.case: r.timings for r in report.results}
    for timings in by_case.values():
        assert_adds_up(timings)
    assert by_case[HANG].waits < HANG_TIMEOUT and by_case[ERROR].waits < PROPAGATION, by_case


def test_the_checks_of_a_resume_case_share_its_breakdown(tmp_path):
    report = verify("torch_save", world_size=2, workdir=tmp_path, cases=["resume@4"])
    assert report.ok, report.explain()
    golden = [r for r in report.results if r.case == "golden"]
    case = [r for r in report.results if r.case == "resume@4"]
    assert golden and all(r.timings is None for r in golden)  # the golden run is no case's
    assert len(case) > 1 and len({id(r.timings) for r in case}) == 1
    timings = case[0].timings
    assert_adds_up(timings)
    assert timings.faulted_save > 0 and timings.resume_run > 0 and timings.waits == 0
