"""The built-in DeepSpeed job: ZeRO stages 0–3 resume bitwise on CPU/gloo.

Also pins down why the job keeps per-rank RNG states in side files: in stages
0–2 DeepSpeed's `client_state` is written by data-parallel rank 0 only and
every rank loads that one copy, so RNG states restored from it are rank 0's.
"""

import importlib.util
from typing import Optional

import pytest

from ckpt_harness import Verdict
from ckpt_harness.job import RankContext
from ckpt_harness.jobs.deepspeed_job import DeepSpeedZero1, DeepSpeedZero3

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (extra 'deepspeed')"
)

JOB = "ckpt_harness.jobs.deepspeed_job:DeepSpeedZero{}"


@pytest.mark.ckpt(world_size=2, steps=4, save_every=2)
@pytest.mark.parametrize("stage", [0, 1, 2, 3])
def test_zero_stage_resumes_bitwise(ckpt, stage):
    report = ckpt.verify(JOB.format(stage))
    report.assert_ok()
    checked = [(r.case, r.check) for r in report.results if r.check in ("state after load", "final state")]
    assert checked == [(f"resume@{k}", c) for k in (2, 4) for c in ("state after load", "final state")]
    # The comparison covers the ZeRO partitions and their Adam moments, not
    # just the replicated module (ZeRO-3 hides its partitions between steps).
    after_load = next(r for r in report.results if r.check == "state after load")
    assert after_load.summary == f"bitwise equal on every rank ({57 if stage == 0 else 37} keys each)"


class _ClientStateOnly:
    """Restores RNG states and data position from DeepSpeed's `client_state`
    (the documented place for "training states in the client code") instead
    of the per-rank side files."""

    def load(self, ctx: RankContext) -> Optional[int]:
        load_path, client_state = self.engine.load_checkpoint(str(ctx.ckpt_dir))
        if load_path is None:
            return None
        extra = client_state["extra"]
        step = int(extra["step"])
        self._restore_extra(extra, step)
        return step


class ClientStateOnlyZero1(_ClientStateOnly, DeepSpeedZero1):
    pass


class ClientStateOnlyZero3(_ClientStateOnly, DeepSpeedZero3):
    pass


@pytest.mark.ckpt(world_size=2, steps=4, save_every=2)
def test_client_state_holds_rank0_rng_only_below_zero3(ckpt):
    report = ckpt.verify(ClientStateOnlyZero1)
    flagged = {r.check: r for r in report.failures() if r.case == "resume@2"}
    assert "state after load" in flagged, report.explain()
    after_load = flagged["state after load"]
    assert "rank 1 rng/" in after_load.summary, after_load.summary
    # Rank 1 got rank 0's RNG streams; rank 0 got its own back, and nothing
    # but RNG state differs (model, optimizer partitions, scheduler are fine).
    assert "rank 1:" in after_load.details and "rank 0:" not in after_load.details, after_load.details
    differing = [line.split(":")[0].strip() for line in after_load.details.splitlines() if line.startswith("  ")]
    assert differing and all(key.startswith("rng/") for key in differing), differing
    assert all(r.verdict is Verdict.PASS for r in report.results if r.check in ("live", "load step"))


@pytest.mark.ckpt(world_size=2, steps=4, save_every=2)
def test_client_state_is_per_rank_under_zero3(ckpt):
    # ZeRO-3 writes one zero_pp_rank_{r}_mp_rank_00_model_states.pt per rank.
    ckpt.verify(ClientStateOnlyZero3).assert_ok()
