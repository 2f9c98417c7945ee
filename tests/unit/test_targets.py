"""The seam between what is under test and the pipelines: picked in one place,
replayed by one repro builder, n/a for what a target cannot do, in its words."""

import pytest

from ckpt_harness import targets
from ckpt_harness.config import ExploreConfig, ScriptExploreConfig
from ckpt_harness.errors import UsageError
from ckpt_harness.targets import JobTarget, NotApplicable, ScriptTarget

SCRIPT = "/home/me/train.py --output_dir {ckpt_dir} --lr 1e-3"


@pytest.mark.parametrize("given, says", [
    ({}, "give either --job"),
    ({"job": "torch_save", "script": SCRIPT}, "give either --job"),
    ({"script": SCRIPT, "steps": 4}, "--steps belong to job mode (with --job), not to --script"),
    ({"job": "torch_save", "nnodes": 2}, "--nnodes belong to script mode (with --script), not to --job"),
])
def test_one_chooser_refuses_a_missing_mixed_or_stray_choice_saying_what_to_give(given, says):
    with pytest.raises(UsageError, match="^" + says.replace("(", r"\(").replace(")", r"\)")):
        targets.chosen(given, "run")


def test_each_kind_is_picked_by_its_option_and_makes_its_own_target():
    job, script = (targets.chosen(given, "explore") for given in ({"job": "torch_save"}, {"script": SCRIPT}))
    assert (job.name, script.name) == ("job", "script")
    made = targets.made(job, "explore", {"job": "torch_save", "steps": 6, "save": "last", "nproc_per_node": 2})
    assert isinstance(made, ExploreConfig) and made.steps == 6  # a setting of another kind is not this one's
    target, plan = targets.split(made)
    assert isinstance(target, JobTarget) and plan.save == "last" and target.save_steps() == [2, 4, 6]
    target, plan = targets.split(targets.made(script, "explore", {"script": SCRIPT, "nproc_per_node": 2}))
    assert isinstance(target, ScriptTarget) and target.world_size == 2 and target.save_steps() is None
    assert plan.hang_timeout == ScriptExploreConfig.__dataclass_fields__["hang_timeout"].default == 60.0


def test_one_repro_builder_leaves_out_each_commands_defaults():
    job = targets.job("torch_save", steps=4)
    assert job.repro("run", case="resume@2") == "ckpt-harness run --job torch_save --steps 4 --case resume@2"
    # explore's own default is 4 steps: left out there
    assert job.repro("explore", {"faults": ("crash",)}, "golden") == \
        "ckpt-harness explore --job torch_save --faults crash --case golden"
    script = targets.script(SCRIPT, nproc_per_node=2)
    assert script.repro("run") == f"ckpt-harness run --script '{SCRIPT}' --nproc-per-node 2"
    assert script.row == "train.py --lr 1e-3" and script.bench_args() == ["--script", SCRIPT, "--nproc-per-node", "2"]
    assert job.bench_args() == ["--job", "torch_save", "--world-size", "2", "--timeout", "60.0"]


def test_what_a_script_cannot_take_is_not_applicable_and_its_shape_is_its_own():
    script = targets.script(SCRIPT)
    assert script.with_settings({"steps": 6, "save_every": 3, "seed": 1, "keep_last": None}) is script
    with pytest.raises(NotApplicable, match="it sets keep_last = 1, which only a Job takes"):
        script.with_settings({"keep_last": 1})
    caps = script.caps
    assert not caps.reports and not caps.steps_known and not caps.parks
    assert {"full_state", "overwrite_flag", "keep_last", "blocked_report", "hard_stop", "launcher_restart"} \
        <= set(caps.lacks)
    assert targets.script(SCRIPT, max_restarts=1).caps.has("launcher_restart")


def test_what_a_job_cannot_do_follows_from_its_class():
    sync, background = targets.job("torch_save"), targets.job("dcp_async")
    assert "hard_stop" in sync.caps.lacks and background.caps.has("hard_stop")
    assert sync.caps.reports and sync.caps.steps_known and sync.caps.live_state and sync.caps.parks
    assert sync.with_settings({"steps": 6, "keep_last": 1, "faults": ("crash",)}).values["keep_last"] == 1


def test_a_ready_made_target_takes_only_the_plan():
    target = targets.script(SCRIPT)
    same, plan = targets.resolve(target, "explore", {"faults": ("crash",)})
    assert same is target and plan.faults == ("crash",) and plan.hang_timeout == 60.0
    with pytest.raises(UsageError, match="a target carries its own settings"):
        targets.resolve(target, "run", {"world_size": 2})
