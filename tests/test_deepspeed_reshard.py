"""The built-in DeepSpeed job resumes at another world size, bitwise.

Stages 1–3 go through DeepSpeed's universal checkpoint (`ds_to_universal`,
then `"checkpoint": {"load_universal": true}`); stage 0 keeps the whole
optimizer in its model-states file and loads it at any world size as it is.
"""

import importlib.util

import pytest

from ckpt_harness import targets
from ckpt_harness.catalogue.bench import Bench
from ckpt_harness.catalogue.scenario_files import parse

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed (extra 'deepspeed')"
)

RESHARD = {"description": "d", "property": "reshardable", "check": "reshard"}


@pytest.mark.parametrize("stage, resume_at", [(0, "half"), (1, "double"), (2, "half"), (3, "double")])
def test_zero_stage_resumes_at_another_world_size(tmp_path, stage, resume_at):
    scenario = parse("s", {**RESHARD, "resume_at": resume_at})
    result = Bench(targets.job(f"ckpt_harness.jobs.deepspeed_job:DeepSpeedZero{stage}", world_size=2, timeout=60),
                   tmp_path).run(scenario)
    assert result.verdict == "pass", result.explain()
