"""Why a case failed (`oracle.causes`), and a baseline that expects a failure for its causes only."""

from __future__ import annotations

import dataclasses
import json

import pytest

from ckpt_harness.catalogue.expectations import Outcome, expectations_toml, from_matrix_json, from_toml
from ckpt_harness.catalogue.scenario import ScenarioResult
from ckpt_harness.oracle.causes import Cause, Severity, cause_of, causes_of, kind_of_key, severity, severity_of
from ckpt_harness.verdict import CaseResult, StateDiff
from ckpt_harness.verdict import Verdict as V


@pytest.mark.parametrize("key, kind", [
    ("rng/numpy.3", "rng"), ("rng/torch", "rng"), ("data/position", "data position"),
    ("optim/0.weight/exp_avg", "optimizer"), ("optim/0.weight/step", "optimizer"),
    ("optim/param_groups/0/lr", "optimizer"), ("scheduler/last_epoch", "counters"), ("step", "counters"),
    ("model/0.weight", "model"),
    # a script's keys: what its save was handed, under the name of what it wrote to
    ("last save.BufferedWriter.optimizer.state.0.exp_avg", "optimizer"),
    ("last save.step_4.pt.model.weight", "model"), ("last save.BufferedWriter.step", "counters"),
    ("trainer_state.json.global_step", "counters"), ("rng_state_0.pth.python", "rng"),
    # Lightning's loop progress (pytorch-lightning 2.4.0 resumed an end-of-epoch checkpoint one epoch short)
    ("BytesIO.loops.fit_loop.epoch_progress.total.completed", "counters"),
    ("BytesIO.loops.fit_loop.epoch_loop.batch_progress.current.ready", "counters"),
    ("BytesIO.loops.fit_loop.epoch_loop.state_dict._batches_that_stepped", "counters"),
    ("BytesIO.state_dict.layer.weight", "model"),
])
def test_a_key_is_read_as_the_part_of_the_training_state_it_is(key, kind):
    assert kind_of_key(key) == kind


def diff(key: str, kind: str = "values", rank: int = 0) -> StateDiff:
    return StateDiff(key, rank, "…", kind)


def judged(check: str, *differences: StateDiff, outcome=None, verdict=V.FAIL, case="resume@4") -> CaseResult:
    return CaseResult(case, check, verdict, "summary", differences=differences, outcome=outcome)


def test_a_cause_is_the_property_the_outcome_and_the_kinds_of_state_that_differ_nothing_else():
    """Ranks, key counts and which keys of a kind do not count: the same bug gives the same cause."""
    rng_only = judged("faithful", diff("rng/numpy.3"), diff("rng/torch", rank=1), outcome="S_k")
    assert cause_of(rng_only) == Cause("faithful", "", ("rng values",))
    assert str(cause_of(rng_only)) == "faithful · rng values"
    # which checkpoint a run that ends differently resumed can race between runs; it is the fault's own
    # property whose failure the outcome is
    assert cause_of(dataclasses.replace(rng_only, outcome="S_prev")) == cause_of(rng_only)
    diverged = judged("faithful", diff("model/0.weight"), diff("optim/0.weight/exp_avg"), diff("rng/torch"),
                      outcome="S_k")
    assert str(cause_of(diverged)) == "faithful · model values, optimizer values, rng values"
    assert str(cause_of(judged("state after load", diff("optim/0.weight/exp_avg", "missing")))) == \
        "state after load · optimizer missing"
    assert str(cause_of(judged("atomic", outcome="refused"))) == "atomic · refused"


def test_the_causes_of_results_are_those_of_their_judgments_with_the_verdict():
    failed = judged("atomic", outcome="refused")
    riding = CaseResult("c", "live", V.FAIL, "hang", also=(judged("faithful", diff("step"), outcome="S_k"),))
    passed = judged("atomic", verdict=V.PASS, outcome="S_k")
    assert causes_of([failed, riding, passed], V.FAIL) == {"atomic · refused", "live", "faithful · counters values"}
    assert causes_of([passed]) == frozenset()


def scenario(verdict: V, *results: CaseResult) -> ScenarioResult:
    return ScenarioResult("resume-every-save", "job", "faithful", verdict, "reason", results=results)


RNG = judged("final state", diff("rng/torch"))
WEIGHTS = judged("final state", diff("model/0.weight"), diff("rng/torch"))


def test_a_baseline_expects_a_failure_for_the_causes_it_records_and_fails_another():
    """The issue's case: a baseline written where a mid-epoch resume loses one RNG value, applied where the
    weights diverge too: same verdict, same scenario, another cause."""
    baseline = from_toml(expectations_toml([scenario(V.FAIL, RNG)]))
    (entry,) = baseline.expectations
    assert entry.causes == {"final state · rng values"}
    same = baseline.gate([scenario(V.FAIL, RNG)])
    assert same.ok and same.gated[0].outcome is Outcome.EXPECTED
    worse = baseline.gate([scenario(V.FAIL, WEIGHTS)])
    assert not worse.ok and worse.gated[0].outcome is Outcome.OTHER_CAUSE
    said = worse.explain()
    assert "NEW      job · resume-every-save: fail, for another cause: observed final state · model values, " \
           "rng values; the baseline expects it for final state · rng values" in said, said
    assert said.endswith("1 new failure, 0 expected, 0 fixed, 0 stale")
    # fewer causes than recorded: still the known failure (part of it fixed)
    both = from_toml(expectations_toml([scenario(V.FAIL, RNG, dataclasses.replace(WEIGHTS, case="resume@2"))]))
    assert both.gate([scenario(V.FAIL, RNG)]).ok


def test_an_entry_without_causes_expects_any_and_a_bad_cause_says_what_to_write():
    loose = from_toml('[[expect]]\njob = "job"\nscenario = "resume-every-save"\nverdict = "fail"\nreason = "r"\n')
    assert loose.expectations[0].causes is None and loose.gate([scenario(V.FAIL, WEIGHTS)]).ok
    with pytest.raises(ValueError, match=r'expect.toml:1: set cause = \["..."\]'):
        from_toml('[[expect]]\njob = "j"\nscenario = "s"\nverdict = "fail"\nreason = "r"\ncause = "x"\n',
                  "expect.toml")


def test_a_matrix_json_records_its_causes_and_one_written_before_them_expects_any():
    recorded = json.dumps({"scenarios": [scenario(V.FAIL, RNG).to_json()]})
    assert from_matrix_json(recorded).gate([scenario(V.FAIL, WEIGHTS)]).gated[0].outcome is Outcome.OTHER_CAUSE
    older = json.loads(recorded)
    del older["scenarios"][0]["causes"]
    assert from_matrix_json(json.dumps(older)).gate([scenario(V.FAIL, WEIGHTS)]).ok


@pytest.mark.parametrize("differences, worst", [
    ((diff("rng/torch"),), Severity.RNG),
    ((diff("rng/torch"), diff("data/position")), Severity.DATA),
    ((diff("rng/torch"), diff("scheduler/last_epoch")), Severity.COUNTERS),
    ((diff("rng/torch"), diff("model/0.weight")), Severity.VALUES),
    ((diff("optim/0.weight/exp_avg"),), Severity.VALUES),
    ((diff("model/0.weight"), diff("optim/0.weight/exp_avg", "missing")), Severity.MISSING),
    ((diff("rng/torch", "unexpected"),), Severity.MISSING),
    ((), None),
])
def test_the_severity_of_a_state_difference_is_its_worst_key(differences, worst):
    assert severity(differences) is worst


def test_a_failure_that_is_not_a_state_comparisons_has_no_degree():
    """A hang or a refused load among the failures: none (never let through as mild); passes do not count."""
    rng = judged("state after load", diff("rng/torch"))
    assert severity_of([rng, judged("final state", verdict=V.PASS)]) is Severity.RNG
    assert severity_of([rng, judged("final state", diff("model/w"))]) is Severity.VALUES
    assert severity_of([rng, judged("atomic", outcome="refused")]) is None
    assert severity_of([]) is None


def test_accelerate_s_rng_file_is_rng_state():
    """accelerate saves each rank's RNG in random_states_<rank>.pkl; a
    difference confined to it is an RNG difference, not a model's."""
    from ckpt_harness.oracle.causes import Severity, kind_of_key, severity
    from ckpt_harness.verdict import StateDiff

    assert kind_of_key("random_states_0.pkl.torch_manual_seed") == "rng"
    assert kind_of_key("random_states_1.pkl.random_state") == "rng"
    assert severity([StateDiff("random_states_0.pkl.torch_manual_seed", 0, "1, expected 2", "values")]) is Severity.RNG
    assert kind_of_key("step_4.pt.model.weight") == "model"  # a numbered file's name is not a counter
