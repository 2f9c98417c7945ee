"""Targets: what is under test and how it is started, behind one protocol (`base.Target`).

This module is the one place that picks a kind of target, from the config
that describes it (as `torch.distributed.elastic`'s `start_processes` picks
a function or a binary, and DCP's `_storage_setup` a storage writer);
everything above it holds a `Target` and never asks which kind.
"""

from __future__ import annotations

from typing import Any, Union

from ckpt_harness.config import ExplorePlan, RunConfig, ScriptConfig
from ckpt_harness.jobref import resolve
from ckpt_harness.targets.base import (
    FAILURE_GRACE,
    PROPAGATION,
    Capabilities,
    NotApplicable,
    RunRequest,
    Stop,
    Target,
)
from ckpt_harness.targets.job import JobTarget
from ckpt_harness.targets.script import ScriptTarget

__all__ = [
    "FAILURE_GRACE", "PROPAGATION", "Capabilities", "JobTarget", "NotApplicable", "RunRequest", "ScriptTarget",
    "Stop", "Target", "job", "of", "script", "split",
]


def job(job: Union[str, type], **settings: Any) -> JobTarget:
    """A Job (a subclass, a registered name or "module:Class") with run
    settings (`RunConfig`'s); unknown settings are refused."""
    ref, _ = resolve(job)
    return JobTarget(RunConfig.build(ref, **settings))


def script(script: str, **settings: Any) -> ScriptTarget:
    """A script's command as after ``python``, with ``{ckpt_dir}``, and
    settings (`ScriptConfig`'s)."""
    return ScriptTarget(ScriptConfig(script=script, **settings))


def of(config: Union[RunConfig, ScriptConfig, Target]) -> Target:
    """The target `config` describes (a target is its own)."""
    if isinstance(config, ScriptConfig):
        return ScriptTarget(ScriptConfig(**{name: getattr(config, name) for name in ScriptConfig.__dataclass_fields__}))
    if isinstance(config, RunConfig):
        return JobTarget(RunConfig(**{name: getattr(config, name) for name in RunConfig.__dataclass_fields__}))
    if isinstance(config, Target):
        return config
    raise TypeError(f"no target is described by {type(config).__name__}: give a RunConfig or a ScriptConfig")


def split(config: Any) -> tuple[Target, ExplorePlan]:
    """A config that breaks a save (`ExploreConfig`, `ScriptExploreConfig`) as
    what it runs and how it breaks it."""
    return of(config), ExplorePlan.of(config)
