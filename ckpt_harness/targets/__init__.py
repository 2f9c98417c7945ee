"""Targets: what is under test and how it is started, behind one protocol (`base.Target`).

This module picks a kind of target from the config that describes it (as
`torch.distributed.elastic`'s `start_processes` picks a function or a
binary, and DCP's `_storage_setup` a storage writer), and the pipelines and
checks then hold a `Target`. A target kept as data (a matrix's row in its
matrix.json, to resume or merge it) is its kind and the settings that
made it (`TargetSpec`), and comes back through the same chooser (`rebuild`).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Mapping, Union

from ckpt_harness.config import ExplorePlan, RunConfig, ScriptConfig, settings_of
from ckpt_harness.errors import ConfigError, UsageError
from ckpt_harness.extensions import registered, with_entry_points
from ckpt_harness.targets.base import (
    FAILURE_GRACE,
    PROPAGATION,
    BaseTarget,
    Capabilities,
    Capability,
    NotApplicable,
    RunRequest,
    Stop,
    Target,
    TargetKind,
)
from ckpt_harness.targets.job import JobTarget
from ckpt_harness.targets.script import ScriptTarget

__all__ = [
    "FAILURE_GRACE", "PROPAGATION", "BaseTarget", "Capabilities", "Capability", "JobTarget", "NotApplicable",
    "RunRequest", "ScriptTarget", "Stop", "Target", "TargetKind", "TargetSpec", "chosen", "config_of", "job", "kinds",
    "make", "named", "of", "picked_by", "rebuild", "resolve", "script", "spec", "split", "takes",
]

ENTRY_POINT_GROUP = "ckpt_harness.targets"
#: Each kind of target by name -> "module:attribute" of its `TargetKind`; others come by entry point.
BUILTIN_KINDS = {"job": "ckpt_harness.targets.job:KIND", "script": "ckpt_harness.targets.script:KIND"}


@functools.lru_cache(maxsize=None)
def kinds() -> tuple[TargetKind, ...]:
    """Every kind of target: the built-in ones, then installed packages'."""
    return tuple(registered("target kind", name, where, TargetKind, UsageError,
                            "is not a ckpt_harness.targets.TargetKind")
                 for name, where in with_entry_points(ENTRY_POINT_GROUP, BUILTIN_KINDS).items())


def chosen(given: Mapping[str, Any], command: str) -> TargetKind:
    """The kind of target the settings `given` (by name, only those given) pick
    for `command`: exactly one kind's option, and no setting that only
    another kind takes. The one place a kind is picked; UsageError else,
    saying what to give."""
    picked = [kind for kind in kinds() if given.get(kind.option) is not None]
    if len(picked) > 1:
        raise UsageError(f"give {' or '.join(kind.flag for kind in picked)}, not both: what runs is one kind of "
                         "target (a matrix's rows too); run one of each")
    if not picked:
        offered = [f"{kind.flag} ({kind.help})" for kind in kinds()]
        raise UsageError(f"give either {', '.join(offered[:-1])} or {offered[-1]}" if len(offered) > 1 else
                         f"give {offered[0]}")
    kind = picked[0]
    mine = settings_of(kind.configs[command])
    for other in kinds():
        theirs = settings_of(other.configs[command])
        stray = [theirs[name].option for name in theirs if name not in mine and name != other.option and name in given]
        if other is not kind and stray:
            raise UsageError(f"{', '.join(stray)} belong to {other.name} mode (with {other.flag}), not to "
                             f"{kind.flag}: {kind.name} mode takes "
                             f"{', '.join(s.option for n, s in mine.items() if n != kind.option)}")
    return kind


def named(name: str) -> TargetKind:
    """The kind of target called `name` ("job", "script", an installed kind's)."""
    for kind in kinds():
        if kind.name == name:
            return kind
    raise UsageError(f"no kind of target is named {name!r}: installed: {', '.join(k.name for k in kinds())}")


def job(job: Union[str, type], **settings: Any) -> JobTarget:
    """A Job (a subclass, a registered name or "module:Class", or a matrix
    row of one: ``dcp[bf16]``, its axes as settings) with run settings
    (`RunConfig`'s); unknown settings are refused."""
    return resolve(job, "run", settings)[0]  # type: ignore[return-value]


def script(script: str, **settings: Any) -> ScriptTarget:
    """A script's command as after ``python``, with ``{ckpt_dir}``, and
    settings (`ScriptConfig`'s); unknown settings are refused."""
    return resolve(script, "run", settings, kind="script")[0]  # type: ignore[return-value]


def of(config: Union[RunConfig, ScriptConfig, Target]) -> Target:
    """The target `config` describes (a config of a kind's, `TargetKind.configs`; a target is its own)."""
    for kind in kinds():
        if isinstance(config, tuple(kind.configs.values())):
            return kind.target(config)
    if isinstance(config, Target):
        return config
    raise TypeError(f"no kind of target takes a {type(config).__name__}: give a RunConfig, a ScriptConfig or a "
                    "config of an installed kind")


def split(config: Any) -> tuple[Target, ExplorePlan]:
    """A config that breaks a save (`ExploreConfig`, `ScriptExploreConfig`) as
    what it runs and how it breaks it."""
    return of(config), ExplorePlan.of(config)


def config_of(kind: TargetKind, command: str, given: Mapping[str, Any]) -> Any:
    """The config of `command` that the settings `given` make for `kind` (those of the command's config)."""
    cls = kind.configs[command]
    takes = settings_of(cls)
    return kind.make(given[kind.option], cls, {name: value for name, value in given.items()
                                               if name in takes and name != kind.option})


def takes(spec: Any, command: str, kind: str = "job") -> dict[str, Any]:
    """The settings the Python API takes with `spec` for `command` ("run",
    "explore"): those of the config of kind `kind` (`spec` its option's
    value: a job, a script's command); a target's own are its own already,
    so only how a save is broken (`ExplorePlan`) for "explore"."""
    if isinstance(spec, Target):
        return settings_of(ExplorePlan) if command == "explore" else {}
    picked = named(kind)
    return {name: s for name, s in settings_of(picked.configs[command]).items() if name != picked.option}


def resolve(spec: Any, command: str, settings: Mapping[str, Any], kind: str = "job") -> tuple[Target, ExplorePlan]:
    """What the Python API (`verify`, `explore`, their ``_script`` forms, the
    ``ckpt`` fixture) is given: the value of kind `kind`'s option (a job: a
    Job subclass, a registered name, "module:Class"; a script's command)
    with its settings, or a target of any kind, ready made; and the plan
    (`ExplorePlan`) for "explore". Unknown settings are refused, naming
    those the call takes."""
    known = takes(spec, command, kind)
    unknown = sorted(set(settings) - set(known))
    if isinstance(spec, Target):
        if unknown:
            raise UsageError(f"unknown setting {', '.join(unknown)}: a target carries its own settings; {command} "
                             f"takes {', '.join(known) or 'none'} with it")
        return spec, ExplorePlan(**settings)
    picked = named(kind)
    cls = picked.configs[command]
    if unknown:
        raise ConfigError(f"unknown setting {', '.join(unknown)}: {cls.__name__} takes {', '.join(known)}")
    config = picked.make(spec, cls, settings)
    return picked.target(config), ExplorePlan.of(config) if command == "explore" else ExplorePlan()


@dataclasses.dataclass(frozen=True)
class TargetSpec:
    """A target as data: its kind's name and every setting that made it, by
    name, the kind's own option among them (``{"script": "train.py
    {ckpt_dir}", "nproc_per_node": 2, ...}``, ``{"job": "dcp", "storage":
    "s3", ...}``). What a matrix.json keeps of a row; `rebuild` makes the
    target again through the chooser every surface uses."""

    kind: str
    settings: Mapping[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "settings": {k: list(v) if isinstance(v, tuple) else v
                                                for k, v in self.settings.items()}}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> "TargetSpec":
        return cls(str(data["kind"]), dict(data["settings"]))


def kind_of(target: Target) -> TargetKind:
    """The kind `target` is of: the one whose name is its noun."""
    return named(target.noun)


def spec(target: Target) -> TargetSpec:
    """`target` as data: its kind, and its kind's option (its name) with every one of its settings."""
    kind = kind_of(target)
    return TargetSpec(kind.name, {kind.option: target.name, **target.values})


def picked_by(spec: TargetSpec) -> Any:
    """The value of the option that picked its kind (a job's name, a script's command)."""
    return spec.settings[named(spec.kind).option]


def make(given: Mapping[str, Any], command: str = "run") -> Target:
    """The target the settings `given` make, as the CLI makes one from
    options: its kind picked by `chosen`, its config by the kind (`config_of`)."""
    kind = chosen(given, command)
    return kind.target(config_of(kind, command, given))


def rebuild(spec: TargetSpec, command: str = "run") -> Target:
    """The target `spec` describes, made again (`make`)."""
    kind = chosen(spec.settings, command)
    if kind.name != spec.kind:
        raise UsageError(f"a {spec.kind} row whose settings pick a {kind.name} ({kind.flag}): give the settings "
                         f"of a {spec.kind}")
    return make(spec.settings, command)
