"""The seam between what is under test and the pipelines: picked in one place,
replayed by one repro builder, n/a for what a target cannot do, in its words."""

import os
from pathlib import Path

import pytest

from ckpt_harness import targets
from ckpt_harness.config import ExploreConfig, ScriptExploreConfig
from ckpt_harness.errors import UsageError
from ckpt_harness.targets import JobTarget, NotApplicable, ScriptTarget

SCRIPT = "/home/me/train.py --output_dir {ckpt_dir} --lr 1e-3"
RESUMABLE = Path(__file__).resolve().parents[1] / "scripts" / "resumable.py"


@pytest.mark.parametrize("given, says", [
    ({}, "give either --job"),
    ({"job": "torch_save", "script": SCRIPT}, "give --job or --script, not both"),
    ({"script": SCRIPT, "steps": 4}, "--steps belong to job mode (with --job), not to --script"),
    ({"job": "torch_save", "nnodes": 2}, "--nnodes belong to script mode (with --script), not to --job"),
])
def test_one_chooser_refuses_a_missing_mixed_or_stray_choice_saying_what_to_give(given, says):
    with pytest.raises(UsageError, match="^" + says.replace("(", r"\(").replace(")", r"\)")):
        targets.chosen(given, "run")


def test_each_kind_is_picked_by_its_option_and_makes_its_own_target():
    job, script = (targets.chosen(given, "explore") for given in ({"job": "torch_save"}, {"script": SCRIPT}))
    assert (job.name, script.name) == ("job", "script")
    made = targets.config_of(job, "explore", {"job": "torch_save", "steps": 6, "save": "last", "nproc_per_node": 2})
    assert isinstance(made, ExploreConfig) and made.steps == 6  # a setting of another kind is not this one's
    target, plan = targets.split(made)
    assert isinstance(target, JobTarget) and plan.save == "last" and target.save_steps() == [2, 4, 6]
    target, plan = targets.split(targets.config_of(script, "explore", {"script": SCRIPT, "nproc_per_node": 2}))
    assert isinstance(target, ScriptTarget) and target.world_size == 2 and target.save_steps() is None
    # A worker says when a fault blocked it, as a Job rank does: its peers get the same grace from then.
    assert plan.hang_timeout == ScriptExploreConfig.__dataclass_fields__["hang_timeout"].default == 3.0


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
    with pytest.raises(NotApplicable, match="it sets keep_last = 1: the script takes keep_last by its own "
                                            "arguments, and --script-args does not say how: give e.g. --script-args "
                                            "'keep_last=--save_total_limit {}'"):
        script.with_settings({"keep_last": 1})
    with pytest.raises(NotApplicable, match="it sets backend = 'nccl': a script picks its own backend"):
        script.with_settings({"backend": "nccl"})
    caps = script.caps
    assert not caps.reports and not caps.steps_known and not caps.parks
    assert {"overwrite_flag", "keep_last", "launcher_restart"} <= set(caps.lacks)
    with pytest.raises(UsageError, match=r"no capability 'blocked_report': a target may lack background_saves"):
        caps.has("blocked_report")  # a name no target can lack would count as one every target has
    with pytest.raises(UsageError, match=r"no capability 'keep-last' \(did you mean 'keep_last'\?\)"):
        targets.Capabilities(False, False, False, False, lacks={"keep-last": "..."})
    assert targets.script(SCRIPT, max_restarts=1).caps.has("launcher_restart")


def test_a_script_is_told_a_scenarios_settings_through_its_own_arguments():
    told = targets.script(SCRIPT, nproc_per_node=2, script_args=(
        "keep_last=--save_total_limit {}", "overwrite=--overwrite_output_dir", "seed=--seed={}"))
    assert told.caps.has("overwrite_flag") and told.caps.has("keep_last")
    rotating = told.with_settings({"keep_last": 2, "overwrite": False, "steps": 6, "nodes": 1})
    assert rotating.argv(Path("/c"))[-2:] == ("--save_total_limit", "2")  # unset, false and untold: nothing
    assert rotating.values["keep_last"] == 2 and rotating != told
    assert rotating.replace(overwrite=True, seed=1).argv(Path("/c"))[-4:] == \
        ("--save_total_limit", "2", "--overwrite_output_dir", "--seed=1")
    assert told.with_settings({"keep_last": None}).argv(Path("/c")) == told.argv(Path("/c"))
    # Simulated nodes are torchrun's real ones, a world size its workers per node.
    nodes = told.with_settings({"nodes": 2})
    assert (nodes.config.nnodes, nodes.config.nproc_per_node, nodes.world_size) == (2, 1, 2)
    assert told.replace(world_size=4).config.nproc_per_node == 4
    assert told.replace(timeout=30.0).timeout == 30.0
    with pytest.raises(NotApplicable, match="cannot be spread evenly over 2 torchrun nodes"):
        nodes.replace(world_size=3)
    with pytest.raises(NotApplicable, match="--script-args 'steps=--max_steps {}'"):
        targets.script(SCRIPT).replace(steps=4)


@pytest.mark.parametrize("given, says", [
    (("keep_last",), "has no ARGS"),
    (("keep_last=--keep",), "needs {} where the value of keep_last goes"),
    (("lr=--lr {}",), "names 'lr', which a script cannot be told"),
    (("seed=--seed {}", "seed=--s {}"), "names seed twice"),
])
def test_script_args_refuse_what_cannot_be_passed_saying_what_to_give(given, says):
    from ckpt_harness.config import ScriptConfig
    from ckpt_harness.errors import ConfigError

    with pytest.raises(ConfigError, match=says):
        ScriptConfig(script=SCRIPT, script_args=given)


def test_what_a_job_cannot_do_follows_from_its_class():
    sync, background = targets.job("torch_save"), targets.job("dcp_async")
    assert "background_saves" in sync.caps.lacks and background.caps.has("background_saves")
    assert sync.caps.reports and sync.caps.steps_known and sync.caps.live_state and sync.caps.parks
    assert sync.with_settings({"steps": 6, "keep_last": 1, "faults": ("crash",)}).values["keep_last"] == 1


def test_a_ready_made_target_takes_only_the_plan():
    target = targets.script(SCRIPT)
    same, plan = targets.resolve(target, "explore", {"faults": ("crash",)})
    assert same is target and plan.faults == ("crash",) and plan.hang_timeout == 3.0
    with pytest.raises(UsageError, match="a target carries its own settings"):
        targets.resolve(target, "run", {"world_size": 2})


# -- the launch forms real projects use ----------------------------------------------------------

def test_a_module_is_run_as_python_m_runs_it_and_named_by_it(tmp_path):
    target = targets.script("-m tests.scripts.resumable {ckpt_dir} --steps 4")
    assert target.argv(tmp_path / "ckpt") == ("-m", "tests.scripts.resumable", str(tmp_path / "ckpt"), "--steps", "4")
    assert target.row == "-m tests.scripts.resumable --steps 4"
    target.preflight()  # importable from here
    with pytest.raises(UsageError, match="no module 'nowhere.train' to run .*importable from here"):
        targets.script("-m nowhere.train {ckpt_dir}").preflight()


def test_a_console_script_on_path_is_the_file_the_shell_would_run(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    cli = bin_dir / "train-cli"
    cli.write_text("#!/usr/bin/env python3\nfrom somewhere import main\nmain()\n")
    cli.chmod(0o755)
    (bin_dir / "not-python").write_text("#!/bin/sh\necho\n")
    (bin_dir / "not-python").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    target = targets.script("train-cli train {ckpt_dir}")
    assert target.argv(tmp_path / "c")[0] == str(cli) and target.row == "train-cli train"
    target.preflight()
    with pytest.raises(UsageError, match="no script at 'not-python'.*console script on PATH"):
        targets.script("not-python {ckpt_dir}").preflight()


def test_the_checkpoint_directory_is_put_in_place_inside_a_config_file_the_command_names(tmp_path):
    config = tmp_path / "train.yaml"
    config.write_text("output_dir: {ckpt_dir}\nsteps: 4\n")
    plain = tmp_path / "data.txt"
    plain.write_text("no placeholder here\n")
    target = targets.script(f"{RESUMABLE} train {config} --data={plain} --also={config}")
    words = target.argv(tmp_path / "ckpt", tmp_path / "run")
    copy = tmp_path / "run" / "configs" / "train.yaml"
    assert words[2:] == (str(copy), f"--data={plain}", f"--also={copy}")
    assert copy.read_text() == f"output_dir: {tmp_path / 'ckpt'}\nsteps: 4\n"
    assert config.read_text().startswith("output_dir: {ckpt_dir}")  # the user's file is left as it was


def test_resume_args_go_last_on_a_run_that_starts_on_a_checkpoint(tmp_path):
    target = targets.script(f"{RESUMABLE} {{ckpt_dir}} --init_from=scratch", resume_args="--init_from=resume")
    ckpt = tmp_path / "ckpt"
    assert target.argv(ckpt)[-1] == "--init_from=scratch"  # nothing there yet: a first run
    (ckpt / "step_2").mkdir(parents=True)
    assert target.argv(ckpt)[-2:] == ("--init_from=scratch", "--init_from=resume")


def test_the_script_itself_and_python_files_are_never_taken_for_config_files(tmp_path):
    """Their ``{ckpt_dir}`` is code (a harness-aware script formats it)."""
    script = tmp_path / "train.py"
    script.write_text('print(f"{ckpt_dir}")\n')
    helper = tmp_path / "helper.py"
    helper.write_text('PATH = "{ckpt_dir}"\n')
    words = targets.script(f"{script} {{ckpt_dir}} --plugin {helper}").argv(tmp_path / "ckpt", tmp_path / "run")
    assert words == (str(script), str(tmp_path / "ckpt"), "--plugin", str(helper))
    assert not (tmp_path / "run" / "configs").exists()


def test_a_command_tells_its_checkpoint_directory_by_a_placeholder_in_it_or_in_a_config_it_names(tmp_path):
    from ckpt_harness.targets.script import tells_ckpt_dir

    config = tmp_path / "train.yaml"
    config.write_text("output_dir: {ckpt_dir}\n")
    script = tmp_path / "train.py"
    script.write_text('print("{ckpt_dir}")\n')  # code, not a config: tells nothing
    assert tells_ckpt_dir(f"{RESUMABLE} {{ckpt_dir}}") and tells_ckpt_dir(f"{RESUMABLE} --out={{ckpt_url}}/x")
    assert tells_ckpt_dir(f"{RESUMABLE} --config={config}") and tells_ckpt_dir(f"-m pkg.train {config}")
    assert not tells_ckpt_dir(f"{RESUMABLE} --steps 4") and not tells_ckpt_dir(f"{script} --plugin {script}")


@pytest.mark.parametrize("log, quoted", [
    ("[ckpt_harness] rank 0 (pid 1, restart 0): train.py\nusage: train.py [-h] out\n"
     "train.py: error: the following arguments are required: out\n"
     "<frozen runpy>:128: RuntimeWarning: 'ckpt_harness.launch.worker' found in sys.modules\n",
     ["train.py: error: the following arguments are required: out"]),
    ("Usage: train.py [OPTIONS] OUT\nTry 'train.py --help' for help.\n\nError: Missing argument 'OUT'.\n",
     ["Error: Missing argument 'OUT'."]),  # click
    ("old attempt: error\n[ckpt_harness] rank 0 (pid 2, restart 1): train.py\nloading\nstarting\ngive --out\n",
     ["loading", "starting", "give --out"]),  # sys.exit("give --out"), the last attempt's lines only
    ("[ckpt_harness] rank 0 (pid 2, restart 0): train.py\n", []),
])
def test_a_refusal_quotes_the_last_lines_the_script_printed(log, quoted):
    from ckpt_harness.targets.script import last_words

    assert last_words(log) == quoted


@pytest.mark.parametrize("capability, shown_by, lacking", [
    ("background_saves", "background", "returned once written"),
    ("full_state", "full_state", "@ckpt_harness.full_state"),
])
def test_what_a_script_can_do_follows_what_its_golden_run_showed(capability, shown_by, lacking):
    """Unknown until its golden run, then told by its saves: a save that
    returned a future (dcp.async_save) gives it a hard stop, and one that
    found a `ckpt_harness.full_state` declared a world-size change. Without,
    it lacks them, saying why (saves that landed as they returned make its
    hard stop the graceful one) or what to add."""
    from tests.unit.synthetic import both

    script = targets.script(SCRIPT)
    assert script.caps.has(capability)
    plain = script.knowing(both(lambda r: r.saved(2).saved(4)))
    assert lacking in plain.caps.lacks[capability]
    shown = both(lambda r: r._record("saved", step=2, state={}, **{shown_by: True}).saved(4))
    assert script.knowing(shown).caps.has(capability)


def test_a_scripts_command_gets_the_directory_for_ckpt_dir_and_where_its_storage_put_it_for_ckpt_url(tmp_path):
    """`{ckpt_url}` is the bucket's prefix on a bucket, the directory itself on local storage (so one command
    runs on both); a config file naming either gets a copy with them in place; a row's name shows neither."""
    from ckpt_harness.targets.script import command, row_name

    script = tmp_path / "train.py"
    script.write_text("")
    config = tmp_path / "train.yaml"
    config.write_text("save_to: {ckpt_url}/run\n")
    words = command(f"{script} --out {{ckpt_dir}} --url={{ckpt_url}} {config}", Path("/c"), url="s3://ckpt/c",
                    configs=tmp_path / "copies")
    assert words[:3] == (str(script), "--out", "/c") and words[3] == "--url=s3://ckpt/c", words
    assert Path(words[4]).read_text() == "save_to: s3://ckpt/c/run\n"
    assert command(f"{script} {{ckpt_url}}", Path("/c"))[1] == "/c"  # local storage: the directory
    assert row_name("train.py --url {ckpt_url} --lr 1") == "train.py --lr 1"
