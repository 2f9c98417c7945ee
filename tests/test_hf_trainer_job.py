"""The built-in HF Trainer job (an owned loop): what its resumes get right,
and the one thing transformers gets wrong, asserted exactly.

What the Trainer restores bitwise at world size 2 on gloo: model, AdamW
moments and step, linear-warmup scheduler, python/numpy/torch RNG (dropout is
on) and the data position, whether the resume lands mid-epoch or on an epoch
boundary.

The finding: resuming from the checkpoint of the last step (`global_step ==
max_steps`, e.g. a job preempted right after its final save and restarted)
is not a no-op. `CallbackHandler.on_train_begin` clears
`control.should_training_stop` and the loop only tests `max_steps` after a
step, so
- mid-epoch, the Trainer trains one step more (step 5 of 4) and writes
  `checkpoint-5`; every further restart adds another;
- on an epoch boundary, the epoch loop is empty: no extra step, but
  `_load_rng_state` (called inside the epoch loop) never runs, so the torch
  RNG is not restored.
"""

import importlib.util

import pytest

from ckpt_harness import Verdict
from ckpt_harness.jobs.hf_trainer import HFTrainerJob

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("transformers") is None or importlib.util.find_spec("accelerate") is None,
    reason="needs the hf extra: transformers, accelerate, safetensors",
)

JOB = "ckpt_harness.jobs.hf_trainer:HFTrainerJob"


class EpochBoundaryHFTrainerJob(HFTrainerJob):
    """Two steps per epoch: with saves every 2 steps, every resume lands on an epoch boundary."""

    steps_per_epoch = 2


def _by_case(report):
    return {(r.case, r.check): r for r in report.results}


@pytest.mark.ckpt(world_size=2, steps=4, save_every=2)
def test_hf_trainer_resumes_bitwise_mid_epoch_and_overshoots_max_steps(ckpt):
    report = ckpt.verify(JOB)
    results = _by_case(report)
    # Everything up to the last save resumes bitwise, mid-epoch (3 steps per epoch).
    for check in ("live", "fresh start"):
        assert results[("golden", check)].verdict is Verdict.PASS, report.explain()
    for k in (2, 4):
        for check in ("live", "load step", "state after load"):
            assert results[(f"resume@{k}", check)].verdict is Verdict.PASS, report.explain()
    assert results[("resume@2", "final state")].verdict is Verdict.PASS, report.explain()
    # The finding: resumed at max_steps, the Trainer trains a 5th step.
    final = results[("resume@4", "final state")]
    assert final.verdict is Verdict.FAIL, report.explain()
    assert "data/step_in_epoch: 2, expected 1" in final.details
    assert "/step (" in final.details and "keys): 1 of 1 elements differ; first at index []: 5.0, expected 4.0" \
        in final.details, final.details
    assert [r for r in report.failures()] == [final], report.explain()


@pytest.mark.ckpt(world_size=2, steps=4, save_every=2)
def test_hf_trainer_on_epoch_boundaries_skips_the_rng_restore_at_max_steps(ckpt):
    report = ckpt.verify(f"{__name__}:EpochBoundaryHFTrainerJob")
    results = _by_case(report)
    # An epoch-boundary resume with steps left restores everything, RNG included.
    for check in ("live", "load step", "state after load", "final state"):
        assert results[("resume@2", check)].verdict is Verdict.PASS, report.explain()
    # The finding: resumed at max_steps on a boundary, the torch RNG stays as set_seed left it.
    loaded = results[("resume@4", "state after load")]
    assert loaded.verdict is Verdict.FAIL, report.explain()
    assert "ranks 0-1 rng/torch:" in loaded.summary and "more keys" not in loaded.summary
    assert {r.check for r in report.failures()} == {"state after load", "final state"}
    assert {r.case for r in report.failures()} == {"resume@4"}
