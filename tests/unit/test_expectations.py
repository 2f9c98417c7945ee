"""Regression gating over synthetic scenario results: every path a result can
take against a baseline, and every way a baseline file can be wrong."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ckpt_harness.errors import UsageError
from ckpt_harness.catalogue.expectations import (BaselineError, Expectations, Outcome, expectations_toml,
                                                 from_matrix_json, from_toml, load)
from ckpt_harness.catalogue.scenario import ScenarioResult
from ckpt_harness.verdict import Verdict as V

ROOT = Path(__file__).resolve().parents[2]

EXPECT = """\
# known to fail on every version
[[expect]]
job = "dcp"
scenario = "power-loss-after-save"
verdict = "fail"
reason = "metadata not fsynced before the rename, pytorch#123"

[[expect]]
job = "deepspeed*"
scenario = "crash-every-phase"
verdict = "fail"
reason = "latest written before the shards, deepspeed#456"
"""


def result(job: str, scenario: str, verdict: V, reason: str = "") -> ScenarioResult:
    return ScenarioResult(scenario, job, "atomic", verdict, reason or f"{scenario} {verdict.value}")


def gate(results, text: str = EXPECT, **scope):
    return from_toml(text, "expect.toml").gate(results, **scope)


def test_a_known_failure_is_expected_with_its_reason_and_the_build_passes():
    g = gate([result("dcp", "power-loss-after-save", V.FAIL), result("dcp", "crash-every-phase", V.PASS)])
    assert [x.outcome for x in g.gated] == [Outcome.EXPECTED, Outcome.OK]
    assert g.ok and g.verdict is V.PASS
    assert "expected dcp · power-loss-after-save: fail, expected: metadata not fsynced before the rename, " \
           "pytorch#123 (expect.toml:2)" in g.explain()
    assert g.explain().endswith("no new failure, 1 expected, 0 fixed, 0 stale")


def test_a_new_failure_fails_the_build_with_the_results_reason():
    g = gate([result("dcp", "power-loss-after-save", V.FAIL),
              result("dcp", "crash-every-phase", V.FAIL, "rank 1 hung")])
    assert [x.outcome for x in g.gated] == [Outcome.EXPECTED, Outcome.NEW]
    assert not g.ok and g.verdict is V.FAIL
    assert "  NEW      dcp · crash-every-phase: fail: rank 1 hung" in g.explain()
    assert g.explain().endswith("1 new failure, 1 expected, 0 fixed, 0 stale")


@pytest.mark.parametrize("verdict", [V.UNKNOWN, V.ERROR])
def test_an_undecided_or_errored_result_with_no_entry_is_new(verdict):
    g = gate([result("torch_save", "crash-every-phase", verdict), result("dcp", "power-loss-after-save", V.FAIL)])
    assert [x.outcome for x in g.gated] == [Outcome.NEW, Outcome.EXPECTED]
    assert g.verdict is verdict  # the build exits as its new problem does, not as the expected failure


@pytest.mark.parametrize("verdict", [V.PASS, V.NA])
def test_a_known_failure_that_no_longer_fails_is_fixed_and_does_not_fail(verdict):
    g = gate([result("dcp", "power-loss-after-save", verdict), result("deepspeed_zero2", "crash-every-phase", V.FAIL)])
    assert [x.outcome for x in g.gated] == [Outcome.FIXED, Outcome.EXPECTED]
    assert g.ok
    assert (f"fixed    dcp · power-loss-after-save: {verdict.value}, the baseline expects fail (expect.toml:2): "
            "fixed, update the baseline") in g.explain()


@pytest.mark.parametrize("verdict", [V.ERROR, V.UNKNOWN])
def test_another_failure_than_the_expected_one_fails(verdict):
    """fail → error: the harness can no longer tell whether the known failure
    is all there is; that is not the state the baseline vouched for."""
    g = gate([result("dcp", "power-loss-after-save", verdict, "golden run crashed")])
    assert g.gated[0].outcome is Outcome.WORSE and not g.ok
    assert (f"WORSE    dcp · power-loss-after-save: {verdict.value}, the baseline expects fail (expect.toml:2): "
            "golden run crashed") in g.explain()


def test_a_pass_of_a_matrix_json_baseline_that_errors_now_is_worse():
    baseline = from_matrix_json(json.dumps({"scenarios": [
        {"job": "dcp", "scenario": "resume-every-save", "verdict": "pass", "reason": "8 cases pass"},
        {"job": "dcp", "scenario": "crash-every-phase", "verdict": "fail", "reason": "S_k half written"},
    ]}), "old/matrix.json")
    g = baseline.gate([result("dcp", "resume-every-save", V.ERROR), result("dcp", "crash-every-phase", V.FAIL)])
    assert [x.outcome for x in g.gated] == [Outcome.WORSE, Outcome.EXPECTED]
    assert "dcp · resume-every-save: error, the baseline expects pass (old/matrix.json: scenarios[0])" in g.explain()
    assert "expected: S_k half written (old/matrix.json: scenarios[1])" in g.explain()


def test_patterns_match_and_the_first_matching_entry_decides():
    text = EXPECT + '\n[[expect]]\njob = "deepspeed_zero3"\nscenario = "*"\nverdict = "error"\nreason = "r"\n'
    g = gate([result("deepspeed_zero3", "crash-every-phase", V.FAIL), result("deepspeed_zero3", "torn-write", V.ERROR)],
             text)
    assert [(x.outcome, x.expectation.where) for x in g.gated] == [
        (Outcome.EXPECTED, "expect.toml:8"), (Outcome.EXPECTED, "expect.toml:14")]


def test_a_row_on_an_axis_is_matched_by_its_own_name_as_well_as_by_a_pattern():
    """A row's name on an axis has brackets (`dcp_s3connector[s3]`), which as
    an fnmatch pattern are a character set: read as a pattern alone, a
    matrix.json did not expect its own row's failures (they were new), nor a
    written baseline, and an entry was stale while its row failed."""
    row = "dcp_s3connector[s3]"
    results = [result(row, "missing-shard", V.FAIL), result("dcp[bf16]", "crash-every-phase", V.FAIL)]
    recorded = from_matrix_json(json.dumps({"scenarios": [
        {"job": row, "scenario": "missing-shard", "verdict": "fail", "reason": "latest deleted: fresh start"},
        {"job": "dcp[bf16]", "scenario": "crash-every-phase", "verdict": "fail", "reason": "torn"},
    ]}), "matrix.json")
    g = recorded.gate(results)
    assert [x.outcome for x in g.gated] == [Outcome.EXPECTED, Outcome.EXPECTED] and g.stale == () and g.ok
    written = from_toml(expectations_toml(results), "expect.toml").gate(results)
    assert [x.outcome for x in written.gated] == [Outcome.EXPECTED, Outcome.EXPECTED] and written.stale == ()
    assert written.part(row, ["missing-shard"]).gated[0].outcome is Outcome.EXPECTED
    # patterns still match a row on an axis, and a name that is not the row's does not
    g = gate(results, '[[expect]]\njob = "dcp*"\nscenario = "*"\nverdict = "fail"\nreason = "r"\n')
    assert [x.outcome for x in g.gated] == [Outcome.EXPECTED, Outcome.EXPECTED]
    g = gate(results, '[[expect]]\njob = "dcp_s3connector[s4]"\nscenario = "*"\nverdict = "fail"\nreason = "r"\n')
    assert g.gated[0].outcome is Outcome.NEW


def test_entries_matching_nothing_the_run_covered_are_stale():
    text = EXPECT + '\n[[expect]]\njob = "dcp"\nscenario = "renamed-scenario"\nverdict = "fail"\nreason = "r"\n'
    results = [result("dcp", "power-loss-after-save", V.FAIL)]
    catalogue = ["power-loss-after-save", "crash-every-phase"]
    g = gate(results, text, catalogue=catalogue)
    assert [e.scenario for e in g.stale] == ["renamed-scenario"]  # the deepspeed entry: no deepspeed job was run
    assert g.ok
    assert ('stale    expect.toml:14 job="dcp" scenario="renamed-scenario" verdict="fail": matches nothing this run '
            "covered; remove it") in g.explain()
    # A scenario the run covered that does not apply to the job any more: stale too.
    g = gate(results, EXPECT, jobs=["dcp", "deepspeed"], scenarios=["power-loss-after-save", "crash-every-phase"])
    assert [e.where for e in g.stale] == ["expect.toml:8"]
    # A run narrowed to other scenarios (--scenarios) leaves the rest alone.
    g = gate(results, EXPECT, jobs=["dcp", "deepspeed"], scenarios=["power-loss-after-save"], catalogue=catalogue)
    assert g.stale == ()


def test_an_empty_baseline_expects_nothing():
    g = gate([result("dcp", "crash-every-phase", V.FAIL)], "")
    assert g.gated[0].outcome is Outcome.NEW and g.stale == ()


def test_written_expectations_load_back_and_expect_exactly_the_failures(tmp_path):
    results = [result("dcp", "a", V.PASS), result("dcp", "b", V.FAIL, 'stale "file" | left\nbehind' + "x" * 300),
               result("tests.planted.jobs:X", "c", V.ERROR), result("dcp", "d", V.NA)]
    (tmp_path / "expect.toml").write_text(expectations_toml(results, "matrix of 2026-01-01, torch 2.13"))
    baseline = load(tmp_path / "expect.toml")
    assert [(e.job, e.scenario, e.verdict) for e in baseline.expectations] == [
        ("dcp", "b", V.FAIL), ("tests.planted.jobs:X", "c", V.ERROR)]
    assert baseline.expectations[0].reason.startswith('stale "file" | left behindxxx')
    assert len(baseline.expectations[0].reason) == 200
    g = baseline.gate(results)
    assert g.ok and len(g.of(Outcome.EXPECTED)) == 2

    # Rewritten after a fix, the baseline keeps the reasons people wrote for what still fails.
    edited = from_toml(expectations_toml(results).replace('verdict = "error"\nreason = "c error"',
                                                          'verdict = "error"\nreason = "see issue 7"'))
    results[1] = result("dcp", "b", V.PASS)
    again = from_toml(expectations_toml(results, keep=edited))
    assert [(e.scenario, e.reason) for e in again.expectations] == [("c", "see issue 7")]


def test_the_shipped_matrix_json_is_a_baseline_for_itself():
    data = json.loads((ROOT / "docs" / "matrix.json").read_text())
    baseline = load(ROOT / "docs" / "matrix.json")
    results = [ScenarioResult(r["scenario"], r["job"], r["property"], V(r["verdict"]), r["reason"])
               for r in data["scenarios"]]
    g = baseline.gate(results)
    assert g.ok and g.stale == () and len(g.gated) == len(data["scenarios"])
    assert len(g.of(Outcome.EXPECTED)) == sum(not V(r["verdict"]).ok for r in data["scenarios"]) > 0


@pytest.mark.parametrize("text, message", [
    ('[[expect]]\njob = "dcp"\nscenario = "x"\nverdict = "fail"\n',
     'expect.toml:1: set reason = "..." (why the verdict is known, e.g. an issue link)'),
    ('[[expect]]\njob = "dcp"\nscenario = "x"\nverdict = "fail"\nreason = "r"\n\n[[expect]]\njob = "dcp"\n'
     'scenario = "x"\nverdict = "failed"\nreason = "r"\n',
     "expect.toml:7: verdict 'failed' is not one of fail, error, unknown, pass, n/a"),
    ('[[expect]]\njob = "dcp"\nscenaro = "x"\nverdict = "fail"\nreason = "r"\n',
     "expect.toml:1: unknown key 'scenaro'; an expectation takes job, scenario, verdict, reason"),
    ('[[expect]]\njob = ""\nscenario = "x"\nverdict = "fail"\nreason = "r"\n', 'expect.toml:1: set job = "..."'),
    ('[[expect]]\njob = 3\nscenario = "x"\nverdict = "fail"\nreason = "r"\n', 'expect.toml:1: set job = "..."'),
    ('[expect]\njob = "dcp"\n', "expect.toml: expect must be a list of tables; write [[expect]], not [expect]"),
    ('[[expects]]\njob = "dcp"\n', "expect.toml: unknown top-level key 'expects'; write each expectation as an "
                                   "[[expect]] table"),
    ('[[expect]]\njob = "dcp\n', "expect.toml: not valid TOML: "),
    ('[[expect]]\njob = "dcp"\nscenario = "x"\nverdict = "fail"\nreason = "r"\n\n[[expect]]\njob = "dcp"\n'
     'scenario = "x"\nverdict = "error"\nreason = "r"\n',
     "expect.toml:7: job 'dcp' scenario 'x' is also expected at expect.toml:1; keep one"),
])
def test_a_bad_expectations_file_says_which_line_and_key_to_fix(text, message):
    with pytest.raises(BaselineError) as info:
        from_toml(text, "expect.toml")
    assert str(info.value).startswith(message)
    assert isinstance(info.value, UsageError)  # the CLI exits 2 on it


@pytest.mark.parametrize("name, text, message", [
    ("matrix.json", "{", "matrix.json: not valid JSON: "),
    ("matrix.json", '{"cells": []}', "matrix.json: no 'scenarios' list; give a matrix.json written by "
                                     "`ckpt-harness matrix`"),
    ("matrix.json", '{"scenarios": [{"job": "dcp", "scenario": "x", "verdict": "nope"}]}',
     "matrix.json: scenarios[0]: verdict 'nope' is not one of"),
    ("matrix.json", '{"scenarios": [{"job": "dcp", "verdict": "fail"}]}',
     'matrix.json: scenarios[0]: set scenario = "..."'),
])
def test_a_bad_matrix_json_says_what_to_fix(tmp_path, name, text, message):
    (tmp_path / name).write_text(text)
    with pytest.raises(BaselineError) as info:
        load(tmp_path / name)
    assert str(info.value).startswith(f"{tmp_path / name}: {message.split(': ', 1)[1]}")


def test_a_missing_baseline_file_says_what_to_give(tmp_path):
    with pytest.raises(BaselineError, match=r"nope.toml: cannot read the baseline \(No such file or directory\); "
                                            r"give a matrix.json"):
        load(tmp_path / "nope.toml")


def test_gating_is_torch_free():
    code = "import sys, ckpt_harness.catalogue.expectations; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_a_baseline_is_typed():
    baseline = from_toml(EXPECT, "expect.toml")
    assert isinstance(baseline, Expectations)
    assert {type(e.verdict) for e in baseline.expectations} == {V}
