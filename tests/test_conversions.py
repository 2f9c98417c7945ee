"""The `convert` check (property "convertible"): a conversion of a committed
save, read back as its consumers load it, must be the job's full state at
that save key for key, bitwise, but for what the conversion documents it
drops; or the conversion refuses. A round trip, put where the save was,
must be resumed by the job's own loader. And the `confuse` check
(format-confusion, "detecting"): the save in another layout of the same
job, handed to its resume, is refused on every rank naming what it found,
or loaded correctly.

Both ways on one saving run of a job with a tied weight
(`tests.planted.conversions`): a converter that saves every file again
passes; four that each lose what real converters have lost are flagged,
each naming the key, and their resumes fail too. The built-in conversions
of DCP run as users run them (`dcp_to_torch_save`, and back with
`torch_save_to_dcp`); a plain optimizer state_dict through
`torch_save_to_dcp` is DCP's own finding (docs/findings.md)."""

from pathlib import Path

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.scenario_files import parse
from ckpt_harness.errors import ConfigError, ScenarioError
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
    case, resumed = cases[name], cases[f"{name} resumed"]
    if CONVERTERS[name] is None:
        assert case.verdict is Verdict.PASS, result.explain()
        assert "keys bitwise equal to save 4" in case.summary
        assert resumed.verdict is Verdict.PASS and "the job's own loader resumed it: bitwise equal" in resumed.summary
        return
    assert resumed.verdict is Verdict.FAIL, result.explain()  # what the loader made of it: not save 4
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


def test_dcps_own_conversions_keep_every_bit_and_a_round_trip_resumes(tmp_path):
    dcp = Bench(targets.job("dcp", world_size=2, timeout=60), tmp_path / "dcp").run(scenario())
    assert dcp.verdict is Verdict.PASS, dcp.explain()
    found = {r.case: r.summary for r in dcp.results}
    assert found.keys() == {"dcp-to-torch-save", "dcp-round-trip", "dcp-round-trip resumed"}
    assert found["dcp-to-torch-save"] == found["dcp-round-trip"] == "45 keys bitwise equal to save 4", found
    assert found["dcp-round-trip resumed"].startswith("the job's own loader resumed it: bitwise equal"), found


def test_a_weights_export_drops_only_what_it_says_and_a_plain_optimizer_through_dcp_is_flagged(tmp_path):
    """torch_save_to_dcp keys a plain optimizer state_dict's state by "0",
    "1", ... while its param_groups still list 0, 1, ...: loaded back,
    Optimizer.load_state_dict restores none of the moments, silently."""
    result = Bench(targets.job("torch_save", world_size=2, timeout=60), tmp_path).run(scenario())
    found = {r.case: r for r in result.results}
    export = found["torch-save-to-safetensors"]
    assert export.verdict is Verdict.PASS, result.explain()
    assert "6 keys bitwise equal" in export.summary and "39 keys left out as documented" in export.summary
    dcp = found["torch-save-to-dcp"]
    assert dcp.verdict is Verdict.FAIL, result.explain()
    assert "the optimizer's state is keyed by '0', '1', '2', ... (str), its param_groups list 0, 1, 2, ... (int)" \
        in dcp.summary


RESUMABLE = Path(__file__).parent / "scripts" / "resumable.py"
#: conversion -> (verdict, what it must say) on the script's save, read as its own layout's loader reads it.
ON_A_SCRIPT = {
    f"{PLANTED}:FAITHFUL": (Verdict.PASS, "keys bitwise equal to save 4"),
    f"{PLANTED}:CASTS_TO_BFLOAT16": (Verdict.FAIL, "state/model/weight: dtype bfloat16, expected float32"),
    "torch-save-to-dcp": (Verdict.FAIL, "2 keys changed type: saved as state/optimizer/state/int:0/momentum_buffer, "
                                        "read back as state/optimizer/state/0/momentum_buffer"),
    "torch-save-to-safetensors": (Verdict.NA, "the save holds no model.pt"),
}


def test_a_scripts_save_is_the_truth_of_its_conversions(tmp_path):
    """A script exposes no full state: its committed save, read by its own
    layout's loader, is what a conversion must keep. Both ways on a torchrun
    script of its own layout (one state.pt and an RNG file per rank in
    checkpoint-N/), and DCP's finding on a plain optimizer found there too,
    named as keys that changed type."""
    script = targets.script(f"{RESUMABLE} {{ckpt_dir}} --staging --rng-files --no-marker --steps 4",
                            nproc_per_node=2, checkpoint_layout="torch_save")
    result = Bench(script, tmp_path).run(scenario(conversions=list(ON_A_SCRIPT)))
    found = {r.case: r for r in result.results}
    assert found.keys() == ON_A_SCRIPT.keys(), result.explain()  # no round trip is resumed: no full state to hold
    for name, (verdict, says) in ON_A_SCRIPT.items():
        case = found[name]
        assert case.verdict is verdict and says in case.summary + case.details, (name, result.explain())


def test_a_script_given_no_layout_or_another_one_is_told_what_to_give(tmp_path):
    bare = targets.script(f"{RESUMABLE} {{ckpt_dir}}", nproc_per_node=2)
    assert "give --checkpoint-layout" in Bench(bare, tmp_path).not_applicable(scenario())
    with pytest.raises(ConfigError, match="checkpoint_layout must be a layout a conversion reads: one of .*dcp"):
        targets.script(f"{RESUMABLE} {{ckpt_dir}}", checkpoint_layout="parquet")


#: job -> what format-confusion must find when its save is handed over as one torch.save file.
LOADERS = {  # the built-in dcp loader's refusal (FileNotFoundError naming .metadata) is in docs/matrix.md
    f"{PLANTED}:ChecksLayout": (Verdict.PASS, "→ refused: ValueError: "),
    f"{PLANTED}:GuessesLayout": (Verdict.FAIL, "→ partial (step 4): "),
}


@pytest.mark.parametrize("job", list(LOADERS))
def test_a_save_in_another_layout_is_refused_naming_it_or_flagged_when_loaded_partially(tmp_path, job):
    confusion = parse("format-confusion", {"description": "d", "property": "detecting", "check": "confuse"})
    result = Bench(targets.job(job, world_size=2, timeout=60), tmp_path).run(confusion)
    verdict, says = LOADERS[job]
    (case,) = result.results
    assert case.case == "dcp-to-torch-save" and case.verdict is verdict, result.explain()
    assert "save 4 handed to the resume as one torch.save file, checkpoint.pt" in case.summary
    assert says in case.summary, case.summary
    if verdict is Verdict.PASS:
        assert "step_000004" in case.summary  # it named what it found


def test_a_conversion_that_reads_another_layout_or_no_such_name_is_said_so(tmp_path):
    other = Bench(targets.job("torch_save", world_size=2), tmp_path).run(scenario(conversions=["dcp-round-trip"]))
    assert other.verdict is Verdict.NA and "no conversion among dcp-round-trip reads the torch_save layout" \
        in other.reason
    with pytest.raises(ScenarioError, match="has unknown nope: choose from .*dcp-to-torch-save.*module:attribute"):
        scenario(conversions=["nope"])
