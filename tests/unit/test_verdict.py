"""One verdict vocabulary, folded the same way from cases to scenarios to matrix cells."""

from __future__ import annotations

import pytest

from ckpt_harness.catalogue.matrix import cell
from ckpt_harness.catalogue.scenario import Scenario, ScenarioResult, summarize
from ckpt_harness.verdict import CaseResult, fold
from ckpt_harness.verdict import Verdict as V

P = pytest.param
F, E, U, OK, NA = V.FAIL, V.ERROR, V.UNKNOWN, V.PASS, V.NA


@pytest.mark.parametrize("parts, whole", [
    P([], NA, id="nothing-is-na"),
    P([NA], NA, id="na"),
    P([NA, OK], OK, id="pass-over-na"),
    P([OK, U, NA], U, id="unknown-over-pass"),
    P([U, E, OK], E, id="error-over-unknown"),
    P([OK, E, F, U, NA], F, id="fail-over-all"),
    P([OK, OK, OK], OK, id="all-pass"),
    P(iter([NA, F]), F, id="any-iterable"),
])
def test_fold(parts, whole):
    assert fold(parts) is whole


@pytest.mark.parametrize("verdict, judged, ok", [
    (OK, True, True), (F, True, False), (NA, True, True), (U, False, False), (E, False, False),
])
def test_judged_and_ok(verdict, judged, ok):
    assert (verdict.judged, verdict.ok) == (judged, ok)


def test_explain_carries_details_and_repro():
    text = CaseResult("save 4 #3", "atomic", F, "S_prev", "rank 0: w differs\n", "ckpt-harness explore").explain()
    assert text == "--- save 4 #3 / atomic: FAIL — S_prev\nrank 0: w differs\nrepro: ckpt-harness explore"


# -- a scenario from its cases --------------------------------------------------------------
SCENARIO = Scenario("crash-every-phase", "atomic", "faults", "SIGKILL at every point", params={})


def case(name, verdict, summary="", check="atomic", repro=None):
    return CaseResult(name, check, verdict, summary, repro=repro)


@pytest.mark.parametrize("results, verdict, reason, repro", [
    P([case("a", OK, "S_k"), case("b", F, "S_prev", repro="R-b"), case("c", OK, "S_k")], F,
      "1 of 3 cases fail (atomic): b: S_prev", "R-b", id="one-fail"),
    P([case("a", F, "x", repro="R-a"), case("a", F, "y", "faithful"), case("b", F, "z", repro="R-b")], F,
      "2 of 2 cases fail (atomic, faithful): a: x", "R-a", id="fails-name-checks-once"),
    P([case("a", OK, "S_k"), case("b", E, "no group", repro="R-b"), case("c", U, "?")], E,
      "1 of 3 cases could not be run: b: no group", "R-b", id="error"),
    P([case("a", OK, "S_k"), case("b", U, "never fired", repro="R-b")], U,
      "1 of 2 cases undecided: b: never fired", "R-b", id="unknown"),
    P([case("a", OK, "S_k"), case("b", OK, "S_prev")], OK, "a: S_k; b: S_prev", None, id="two-pass-listed"),
    P([case(n, OK, "S_k") for n in "abc"], OK, "3 cases pass", None, id="three-pass-counted"),
    P([case("a", NA, "no full_state"), case("b", NA, "other")], NA, "no full_state", None, id="na"),
    P([], U, "no cases to run", None, id="no-cases"),
])
def test_summarize(results, verdict, reason, repro):
    got = summarize("torch_save", SCENARIO, results)
    assert (got.verdict, got.reason, got.repro) == (verdict, reason, repro)
    assert (got.scenario, got.job, got.property) == ("crash-every-phase", "torch_save", "atomic")
    assert got.cases == len({r.case for r in results})


def test_summarize_details_explain_only_the_cases_that_are_not_ok():
    got = summarize("j", SCENARIO, [case("a", OK, "fine"), case("b", F, "broke"), case("c", U, "unsure")])
    assert "b / atomic: FAIL — broke" in got.details and "c / atomic: UNKNOWN — unsure" in got.details
    assert "a / atomic" not in got.details


@pytest.mark.parametrize("unit, reason", [("cases", "a: S_k; b: S_k"), ("points", "2 points pass")])
def test_summarize_lists_few_cases_only_in_cases(unit, reason):
    assert summarize("j", SCENARIO, [case("a", OK, "S_k"), case("b", OK, "S_k")], unit).reason == reason


# -- a matrix cell from its scenarios ---------------------------------------------------------------
def scenario(name, verdict, reason="", cases=1, repro=None):
    return ScenarioResult(name, "torch_save", "atomic", verdict, reason, repro, cases=cases)


@pytest.mark.parametrize("results, verdict, reason, repro", [
    P([scenario("s1", OK, cases=4), scenario("s2", F, "1 of 3 fail", repro="R2"), scenario("s3", F, "x")], F,
      "s2: 1 of 3 fail (and 1 more scenario)", "R2", id="fail-first-and-one-more"),
    P([scenario("s1", F, "a", repro="R1"), scenario("s2", F, "b"), scenario("s3", F, "c")], F,
      "s1: a (and 2 more scenarios)", "R1", id="fail-and-two-more"),
    P([scenario("s1", OK), scenario("s2", E, "no group", repro="R2")], E, "s2: no group", "R2", id="error"),
    P([scenario("s1", OK, cases=4), scenario("s2", U, "undecided")], U, "s2: undecided", None, id="unknown"),
    P([scenario("s1", OK, cases=4), scenario("s2", NA, "n/a"), scenario("s3", OK, cases=3)], OK,
      "s1, s3: 7 cases pass", None, id="pass-counts-cases"),
    P([scenario("s1", NA, "needs full_state"), scenario("s2", NA, "other")], NA, "needs full_state", None,
      id="all-na"),
    P([], NA, "no scenario of the catalogue judges this property", None, id="no-scenarios"),
])
def test_cell(results, verdict, reason, repro):
    got = cell("torch_save", "atomic", results)
    assert (got.verdict, got.reason, got.repro) == (verdict, reason, repro)
    assert got.scenarios == tuple(r.scenario for r in results)
