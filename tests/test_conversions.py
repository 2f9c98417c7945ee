"""The `convert` check (property "convertible"): a conversion of a committed
save, read back as its consumers load it, must be the job's full state at
that save key for key, bitwise, but for what the conversion documents it
drops; or the conversion refuses.

Both ways on one saving run of a job with a tied weight
(`tests.planted.conversions`): a converter that saves every file again
passes; four that each lose what real converters have lost are flagged,
each naming the key. The built-in conversions of DCP run as users run
them (`dcp_to_torch_save`, and back with `torch_save_to_dcp`)."""

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.scenario import parse
from ckpt_harness.errors import ScenarioError
from ckpt_harness.verdict import Verdict

PLANTED = "tests.planted.conversions"
TIED = f"{PLANTED}:TiedTorchSave"
#: conversion -> what its failure must name (None: it must pass).
CONVERTERS = {
    "FAITHFUL": None,
    "DROPS_TIED_WEIGHT": "model/net.3.weight: missing",
    "CASTS_TO_BFLOAT16": "dtype bfloat16, expected float32",
    "LOSES_OPTIMIZER_STEP": "/step",
    "MIXES_TWO_SAVES": "optim/net.0.weight/exp_avg",
}


def scenario(**table):
    return parse("convert", {"description": "d", "property": "convertible", "check": "convert", **table})


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """Every planted converter on one saving run of the tied job: case -> result."""
    names = [f"{PLANTED}:{name}" for name in CONVERTERS]
    result = Bench(targets.job(TIED, world_size=2, timeout=60), tmp_path_factory.mktemp("planted")).run(
        scenario(conversions=names))
    return {r.case.rsplit(":", 1)[1]: r for r in result.results}, result


@pytest.mark.parametrize("name", list(CONVERTERS))
def test_a_faithful_conversion_passes_and_each_lossy_one_is_flagged_naming_the_key(planted, name):
    cases, result = planted
    case = cases[name]
    if CONVERTERS[name] is None:
        assert case.verdict is Verdict.PASS, result.explain()
        assert "keys bitwise equal to save 4" in case.summary
        return
    assert case.verdict is Verdict.FAIL, result.explain()
    assert case.summary.startswith("the converted checkpoint is not save 4"), case.summary
    named = case.summary + case.details + " ".join(f"{d.key}: {d.what}" for d in case.differences)
    assert CONVERTERS[name] in named, named
    assert case.repro and f"--case {PLANTED}:{name}" in case.repro


def test_each_difference_is_a_row_with_its_key_and_where(planted):
    cases, _ = planted
    (mixed,) = [d for d in cases["MIXES_TWO_SAVES"].differences if d.key == "optim/net.0.weight/exp_avg"]
    assert mixed.kind == "values" and mixed.first_index is not None and mixed.max_abs > 0
    cast = {d.kind for d in cases["CASTS_TO_BFLOAT16"].differences if d.key.startswith("model/")}
    assert cast == {"dtype"}


def test_dcps_own_conversions_keep_every_bit_and_a_weights_export_drops_only_what_it_says(tmp_path):
    dcp = Bench(targets.job("dcp", world_size=2, timeout=60), tmp_path / "dcp").run(scenario())
    assert dcp.verdict is Verdict.PASS, dcp.explain()
    assert {r.case for r in dcp.results} == {"dcp-to-torch-save", "dcp-round-trip"}
    assert all("45 keys bitwise equal to save 4" == r.summary for r in dcp.results), dcp.explain()
    export = Bench(targets.job("torch_save", world_size=2, timeout=60), tmp_path / "ts").run(scenario())
    assert export.verdict is Verdict.PASS, export.explain()
    (case,) = export.results
    assert "6 keys bitwise equal" in case.summary and "keys left out as documented" in case.summary


def test_a_conversion_that_reads_another_layout_or_no_such_name_is_said_so(tmp_path):
    other = Bench(targets.job("torch_save", world_size=2), tmp_path).run(scenario(conversions=["dcp-round-trip"]))
    assert other.verdict is Verdict.NA and "no conversion reads the torch_save layout among dcp-round-trip" \
        in other.reason
    with pytest.raises(ScenarioError, match="has unknown nope: choose from .*dcp-to-torch-save.*module:attribute"):
        scenario(conversions=["nope"])
