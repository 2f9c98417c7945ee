"""Run settings: each refuses bad values by name, configs check their rules, the CLI replays them."""

from __future__ import annotations

import argparse
import math

import pytest

from ckpt_harness import config, targets
from ckpt_harness.catalogue import scenario_files as scenario
from ckpt_harness.config import SETTINGS, ExploreConfig, RunConfig
from ckpt_harness.errors import ConfigError, ScenarioError
from ckpt_harness.jobref import JobRef
from ckpt_harness.launch import MAX_WORLD_SIZE

P = pytest.param
JOB = JobRef("m", "C", spec="torch_save")
NAN = math.nan

#: setting -> (a value of the wrong type, a value of the right type out of range, or ... for none)
BAD = {
    "world_size": ("2", MAX_WORLD_SIZE + 1),
    "steps": (8.0, 0),
    "save_every": (True, 0),
    "keep_last": ("3", 0),
    "overwrite": (1, ...),
    "cold_start": ("yes", ...),
    "seed": (1.5, ...),
    "timeout": ("60", 0.0),
    "backend": (1, "mpi"),
    "launcher": (True, "slurm"),
    "nodes": (None, 0),
    "save": (1.5, 0),
    "faults": ("crash", ("crash", "meteor")),
    "corruptions": (None, ("bit-flip", "fire")),
    "ops": ({"open"}, ("teleport",)),
    "after": ("yes", ...),
    "durability": (True, "lazy"),
    "timelines": (True, "some"),
    "delay": ([0.5], -0.5),
    "grace": ([30.0], 0),
    "hang_timeout": (None, 0),
    "parallel": (2.0, 0),
    "max_cases": (2.5, 0, -1),
    "flake": (2.5, 1, 0),
    "share_resumes": ("no", ...),
    "derive_states": (0, ...),
    "script": (["train.py"], ...),
    "script_args": ("keep_last=--keep {}", ("backend=--backend {}",)),
    "nproc_per_node": ("2", 0),
    "nnodes": (1.0, MAX_WORLD_SIZE + 1),
    "max_restarts": (None, -1),
    "checkpoint_layout": (1, "parquet"),
    "keeps_best": ("true", ...),
    "resume_args": (["--resume"], ...),
    "save_spacing": ("1s", -1.0),
    "precision": (16, "fp8"),
    "optimizer": (None, "lamb"),
    "data": (["workers"], "disk"),
    "compile": ("yes", ...),
    "storage": (None, "gcs"),
    "pins": (["lightning==2.5.2"], "; touch pwned"),
    "upgrade_from": (2, "lightning=2.4.0"),
    "find_links": (["wheels"], ...),
    "envs_dir": (None, ...),
}
CASES = [P(name, value, id=f"{name}-{label}") for name, pair in BAD.items()
         for label, value in zip(("type", "range"), pair) if value is not ...]


def test_the_table_covers_every_setting():
    assert set(BAD) == set(SETTINGS)


@pytest.mark.parametrize("name, value", CASES)
def test_a_setting_refuses_a_bad_value_by_name(name, value):
    with pytest.raises(ConfigError) as info:
        SETTINGS[name].check(value)
    listed = isinstance(value, (list, tuple)) and SETTINGS[name].kind is tuple
    shown = ",".join(map(str, value)) if listed else repr(value)  # a list setting's value as it was typed
    assert str(info.value).startswith(f"{name} ") and str(info.value).endswith(f", got {shown}")


@pytest.mark.parametrize("name, value", [
    P("timeout", NAN, id="timeout-nan"), P("delay", NAN, id="delay-nan"), P("hang_timeout", NAN, id="hang-nan"),
])
def test_a_positive_setting_refuses_nan(name, value):
    with pytest.raises(ConfigError, match=name):
        SETTINGS[name].check(value)


@pytest.mark.parametrize("name, value, out", [
    P("world_size", MAX_WORLD_SIZE, MAX_WORLD_SIZE, id="world_size-max"),
    P("keep_last", None, None, id="keep_last-unset"),
    P("timeout", 5, 5, id="timeout-int"),
    P("save", 6, 6, id="save-step"),
    P("save", "last", "last", id="save-last"),
    P("faults", ["crash", "torn"], ("crash", "torn"), id="faults-list-to-tuple"),
    P("ops", [], (), id="ops-empty"),
    P("after", None, None, id="after-unset"),
])
def test_a_setting_accepts_a_good_value(name, value, out):
    assert SETTINGS[name].check(value) == out


@pytest.mark.parametrize("values, words", [
    P({"steps": 0}, "steps must be at least 1, got 0", id="range"),
    P({"bogus": 1, "steps": 3}, "unknown setting bogus: RunConfig takes world_size, steps, save_every, keep_last, "
                                "overwrite, seed, timeout, backend, nodes", id="unknown-name"),
    P({"save": "first"}, "unknown setting save: RunConfig takes", id="explore-only-name"),
    P({"steps": 2, "save_every": 3}, "save_every (3) must not exceed steps (2)", id="save_every-over-steps"),
    P({"world_size": 4, "nodes": 3}, "3 simulated nodes cannot share 4 ranks evenly", id="nodes-not-dividing"),
])
def test_run_config_build_refuses(values, words):
    with pytest.raises(ConfigError) as info:
        RunConfig.build(JOB, **values)
    assert words in str(info.value)


@pytest.mark.parametrize("values, k, prev", [
    P({"steps": 8, "save": "first"}, 2, None, id="first"),
    P({"steps": 8, "save": "second"}, 4, 2, id="second"),
    P({"steps": 8, "save": "last"}, 8, 6, id="last"),
    P({"steps": 8, "save": 6}, 6, 4, id="int"),
    P({"steps": 9, "save_every": 3, "save": "last"}, 9, 6, id="every-3"),
    P({"steps": 2, "save": "second"}, 2, None, id="second-of-one-save"),
])
def test_the_save_a_plan_breaks_and_the_one_before_it(values, k, prev):
    cfg = ExploreConfig.build(JOB, **values)
    plan = config.ExplorePlan.of(cfg)
    assert plan.broken(cfg.save_steps) == k
    assert config.save_before(cfg.save_steps, k) == prev


@pytest.mark.parametrize("values, words", [
    P({"steps": 8, "save": 3}, "save 3 is not a save step; choose from 2, 4, 6, 8", id="between-saves"),
    P({"steps": 8, "save": 10}, "save 10 is not a save step", id="past-the-end"),
    P({"save": "middle"}, "save must be one of first, second, last or a save step number", id="unknown-name"),
])
def test_explore_config_refuses_a_save_that_is_not_one(values, words):
    with pytest.raises(ConfigError, match=words):
        ExploreConfig.build(JOB, **values)


def repro_args(cfg: ExploreConfig) -> list[str]:
    """What an exploration's repro lines pass: the target's settings and the plan's, defaults left out."""
    target, plan = targets.split(cfg)
    return target.cli_args("explore", plan.values)


def replay(cfg: ExploreConfig) -> ExploreConfig:
    parser = argparse.ArgumentParser()
    config.add_arguments(parser, ExploreConfig)
    args = repro_args(cfg)
    assert args[:2] == ["--job", "torch_save"]
    return ExploreConfig.build(JOB, **config.values_from(parser.parse_args(args[2:]), ExploreConfig))


@pytest.mark.parametrize("values", [
    P({}, id="defaults"),
    P({"world_size": 4, "nodes": 2, "backend": "nccl", "seed": -3, "keep_last": 3}, id="layout"),
    P({"steps": 8, "save": 6, "overwrite": True, "timeout": 12.5, "after": False}, id="save-int-flags"),
    P({"save": "last", "faults": (), "corruptions": ("delete",), "ops": ("rename", "fsync")}, id="lists"),
    P({"durability": "ordered", "delay": 0.25, "hang_timeout": 7.0, "after": True}, id="models"),
    P({"timeout": 1234.5678}, id="precise-float"),
])
def test_cli_round_trip(values):
    cfg = ExploreConfig.build(JOB, **values)
    assert replay(cfg) == cfg


def test_cli_args_leave_out_defaults_and_settings_that_are_not_replayed():
    assert repro_args(ExploreConfig.build(JOB, parallel=8)) == ["--job", "torch_save"]
    assert repro_args(ExploreConfig.build(JOB, after=False, seed=5)) == [
        "--job", "torch_save", "--seed", "5", "--no-after"]


# -- scenario files --------------------------------------------------------------------------
BASE = {"property": "atomic", "check": "faults", "description": "crash everywhere", "faults": ["crash"]}


@pytest.mark.parametrize("changes, words", [
    P({"steps": 0}, "steps must be at least 1, got 0", id="range"),
    P({"faults": ["crash", "meteor"]}, "faults has unknown meteor: choose from", id="unknown-choice"),
    P({"overwrite": "yes"}, "check 'faults' has no parameter 'overwrite'", id="not-a-parameter"),
    P({"steps": 4, "save_every": 6}, "save_every (6) must not exceed steps (4)", id="save_every-over-steps"),
    P({"save": 3}, "save 3 is not a save step", id="save-not-a-save-step"),
    P({"faults": [], "corruptions": []}, "nothing to inject", id="check-validate"),
    P({"property": "speedy"}, "unknown property 'speedy'; choose from atomic", id="unknown-property"),
    P({"check": "nope"}, "unknown check 'nope'", id="unknown-check"),
    P({"jobs": []}, "jobs must be a non-empty list", id="empty-jobs"),
])
def test_scenario_parse_names_file_scenario_and_key(changes, words):
    with pytest.raises(ScenarioError) as info:
        scenario.parse("crash-all", {**BASE, **changes}, "cat.toml")
    assert str(info.value).startswith("cat.toml: [crash-all]: ")
    assert words in str(info.value)


def test_scenario_parse_fills_the_check_defaults():
    got = scenario.parse("crash-all", {**BASE, "steps": 8, "jobs": ["torch*"]}, "cat.toml")
    assert (got.name, got.property, got.check, got.jobs, got.source) == (
        "crash-all", "atomic", "faults", ("torch*",), "cat.toml")
    assert got.params["faults"] == ("crash",) and got.params["steps"] == 8 and got.params["save"] == "second"
    assert got.applies_to("torch_save") and not got.applies_to("dcp")


def test_a_scenario_naming_a_row_on_an_axis_applies_to_that_row():
    """Brackets read as a pattern are a set of characters: `dcp[bf16]` and a
    script row whose command has them matched no row, and the scenario ran on nothing."""
    row = scenario.parse("crash-all", {**BASE, "jobs": ["dcp[bf16]", "resumable.py --bug x[1]"]}, "cat.toml")
    assert row.applies_to("dcp[bf16]") and row.applies_to("resumable.py --bug x[1]")
    assert not row.applies_to("dcp") and not row.applies_to("dcp[fp16]") and not row.applies_to("torch_save")
    every = scenario.parse("crash-all", {**BASE, "jobs": ["dcp"]}, "cat.toml")  # a job's name: its rows on axes too
    assert every.applies_to("dcp[bf16]") and every.applies_to("dcp")


def test_a_boolean_options_text_is_read_as_its_word_not_by_bool():
    """The pytest plugin's options parse their text with `option_type`, and
    `bool("false")` is True: `--ckpt-keeps-best=false` must be false."""
    import argparse

    from ckpt_harness.config import SETTINGS, option_type

    parse = option_type(SETTINGS["keeps_best"])
    assert [parse(word) for word in ("true", "False", "yes", "0", "on")] == [True, False, True, False, True]
    with pytest.raises(argparse.ArgumentTypeError, match="expected true or false, got 'maybe'"):
        parse("maybe")
