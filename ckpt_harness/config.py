"""Run settings: each declared once, with its default, range and help.

Every surface derives from these declarations instead of restating them:
the CLI options (`add_arguments`/`from_args`), the `@pytest.mark.ckpt`
keys and the fixture's keyword arguments, the parameters of scenario files
(checks list the settings they take), repro lines (`cli_args`) and
validation. A name is the same everywhere: `steps` in Python, `--steps` on
the command line, `steps = 6` in TOML.

`RunConfig` is what defines one group run of a job; `ExploreConfig` adds
what breaking one of its saves needs. Both validate on construction, so a
bad value fails before anything is launched (and before torch is imported).
"""

from __future__ import annotations

import argparse
import dataclasses
import shlex
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from ckpt_harness.job import axes as axes_mod
from ckpt_harness.errors import ConfigError, did_you_mean
from ckpt_harness.inject.corrupt import CORRUPTIONS, DEFAULT_CORRUPTIONS, UNSAFE_PICKLE
from ckpt_harness.inject.faults import BLOCKING, BY_NAME, FAULT_KINDS, KINDS, OPS
from ckpt_harness.jobref import JobRef
from ckpt_harness.launch import MAX_WORLD_SIZE

#: What `explore` injects unless told otherwise. The kinds that block a rank
#: for good (hang, sigstop, gil) cost a deadline per case and delay a sleep:
#: all opt-in.
DEFAULT_FAULTS = tuple(k.name for k in sorted((k for k in FAULT_KINDS if k.default is not None),
                                              key=lambda k: k.default))
SAVES = ("first", "second", "last")
#: How production launches the job (setting "launcher"): "elastic" ends the whole
#: group when a worker exits with an error, "plain" does not.
ELASTIC, PLAIN = LAUNCHERS = ("elastic", "plain")


def ends_group(values: Mapping[str, Any]) -> bool:
    """Does a worker that exits with an error end its group, under the
    launcher these settings name? (A target without the setting, a script
    under real torchrun, is launched elastically.)"""
    return values.get("launcher", ELASTIC) == ELASTIC


@dataclasses.dataclass(frozen=True)
class Setting:
    """One setting: its type and limits, and a line of help."""

    name: str
    #: int, float, bool, str, or tuple (a list of `choices`).
    kind: type
    default: Any
    help: str
    low: Optional[float] = None
    high: Optional[float] = None
    #: Must be > 0 (seconds).
    positive: bool = False
    choices: Sequence[str] = ()
    #: None is a valid value (meaning "not set").
    optional: bool = False
    #: Part of what a case is, so repro lines carry it (not e.g. `parallel`).
    replayed: bool = True
    #: Extra rule for values the type and limits cannot express.
    rule: Optional[Callable[[Any], Optional[str]]] = None

    def describe(self) -> str:
        """Its help line with its range and default, as `--help` and `ckpt-harness list` show it."""
        limits = []
        if self.low is not None:
            limits.append(f"{self.low:g}..{self.high:g}" if self.high is not None else f"at least {self.low:g}")
        if self.kind is tuple:
            limits.append(f"comma-separated, of {','.join(map(str, self.choices))}" if self.choices
                          else "comma-separated")
        if "(default:" not in self.help:
            shown = ",".join(map(str, self.default)) or "none" if isinstance(self.default, tuple) else self.default
            limits.append(f"default: {'unset' if shown is None else shown}")
        return f"{self.help} ({'; '.join(limits)})" if limits else self.help

    @property
    def option(self) -> str:
        return "--" + self.name.replace("_", "-")

    def with_default(self, default: Any) -> "Setting":
        return dataclasses.replace(self, default=default)

    def check(self, value: Any) -> Any:
        """`value` if valid (tuples for lists); raises ConfigError saying what to give."""
        if value is None and self.optional:
            return None
        value = tuple(value) if self.kind is tuple and isinstance(value, (list, tuple)) else value
        problem = self._problem(value)
        if problem:
            shown = ",".join(map(str, value)) if isinstance(value, tuple) else repr(value)  # as it was typed
            raise ConfigError(f"{self.name} {problem}, got {shown}")
        return value

    def _problem(self, value: Any) -> Optional[str]:
        if self.rule is not None:
            return self.rule(value)
        if self.kind is bool:
            return None if isinstance(value, bool) else "must be true or false"
        if self.kind is tuple:
            bad = [v for v in value if v not in self.choices] if isinstance(value, tuple) else None
            if bad is None:
                return "must be a list"
            if not bad:
                return None
            return (f"has unknown {', '.join(map(str, bad))}{did_you_mean(str(bad[0]), self.choices)}: choose from "
                    f"{', '.join(self.choices)}")
        if self.kind is str:
            if not isinstance(value, str):
                return "must be a string"
            return f"must be one of {', '.join(self.choices)}" if self.choices and value not in self.choices else None
        numeric = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not numeric or (self.kind is int and not isinstance(value, int)):
            return ("must be an integer" + (" or unset" if self.optional else "") if self.kind is int
                    else "must be a number")
        if self.positive and not value > 0:  # NaN too
            return "must be a positive number of seconds"
        if self.low is not None and self.high is not None and not self.low <= value <= self.high:
            return f"must be between {self.low:g} and {self.high:g}"
        if self.low is not None and value < self.low:
            return f"must be at least {self.low:g}"
        return None


def _save_rule(value: Any) -> Optional[str]:
    if value in SAVES or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
        return None
    return f"must be one of {', '.join(SAVES)} or a save step number"


#: The Job settings a script can be told through its own arguments (`script_args`).
SCRIPT_ARGS = ("keep_last", "overwrite", "seed", "steps", "save_every", *axes_mod.TRAINING)


def _script_args_rule(value: Any) -> Optional[str]:
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        return "must be a list of NAME=ARGS"
    for item in value:
        name, eq, args = item.partition("=")
        if not eq or not args.strip():
            return f"takes NAME=ARGS ({item!r} has no ARGS after '='), e.g. 'keep_last=--save_total_limit {{}}'"
        if name.strip() not in SCRIPT_ARGS:
            return f"names {name.strip()!r}, which a script cannot be told: choose from {', '.join(SCRIPT_ARGS)}"
        if SETTINGS[name.strip()].kind is not bool and "{}" not in args:
            return f"needs {{}} where the value of {name.strip()} goes in {args.strip()!r}"
    names = [item.partition("=")[0].strip() for item in value]
    twice = sorted({n for n in names if names.count(n) > 1})
    return f"names {', '.join(twice)} twice" if twice else None


def script_args(value: Sequence[str]) -> dict[str, str]:
    """`script_args` as setting name -> its arguments' template."""
    return {name.strip(): args.strip() for name, _, args in (item.partition("=") for item in value)}


def _layout_rule(value: Any) -> Optional[str]:
    from ckpt_harness import conversions  # cheap: no framework is imported

    known = conversions.layouts()
    return None if value in known else f"must be a layout a conversion reads: one of {', '.join(known)}"


def _pins_rule(value: Any) -> Optional[str]:
    from ckpt_harness.launch import envs  # torch-free: packaging only

    if not isinstance(value, str):
        return "must be a string of requirements, as after `pip install`"
    try:
        if value.strip():
            envs.Pins(tuple(pins(value)))
    except ValueError as exc:
        return f"has {exc}"
    return None


def pins(value: str) -> list[str]:
    """The requirements a `pins` or `upgrade_from` setting names, as after
    `pip install` (split as a shell splits words, run by none)."""
    return shlex.split(value)


def _after_rule(value: Any) -> Optional[str]:
    return None if value is None or isinstance(value, bool) else "must be true, false or unset"


SETTINGS: dict[str, Setting] = {s.name: s for s in (
    Setting("world_size", int, 2, "ranks in the group", low=1, high=MAX_WORLD_SIZE),
    Setting("steps", int, 8, "optimizer steps", low=1),
    Setting("save_every", int, 2, "save every K steps", low=1),
    Setting("keep_last", int, None, "ask the job to keep only the last N checkpoints (ctx.keep_last)",
            low=1, optional=True),
    Setting("overwrite", bool, False, "set ctx.overwrite for the job"),
    Setting("save_spacing", float, 0.0, "seconds every rank waits once a save returned, so that consecutive "
            "checkpoints' modification times are at least that far apart: a job that orders its checkpoints by "
            "time only when they are far enough apart (transformers' rotation: a second) is then taken down that "
            "path; 0 saves as fast as the job trains", low=0),
    Setting("seed", int, 0, "seed of the job (ranks are seeded with seed + rank)"),
    Setting("timeout", float, 60.0, "seconds a group run may take before it counts as hung", positive=True),
    Setting("backend", str, "gloo", "process group backend", choices=("gloo", "nccl")),
    Setting("nodes", int, 1, "simulated nodes sharing the ranks and one file system", low=1),
    *(Setting(name, bool, False, axes_mod.HELP[name]) if values == (False, True) else
      Setting(name, str, values[0], axes_mod.HELP[name], choices=values)
      for name, values in axes_mod.VALUES.items()),
    Setting("cold_start", bool, False, "start a script's torchrun workers, and the process a rank spawns to save "
            "(DCP's checkpoint process), as fresh interpreters, as outside the harness, instead of forked from a "
            "template that imported torch (2-4 s of CPU less per process and run); a case that does not pass warm "
            "is run again cold either way and judged by that run"),
    Setting("launcher", str, "elastic", "how the job is launched in production, which decides whether a rank "
            "whose error ended it, its peers waiting in a collective, is a hang: elastic (torchrun, deepspeed, "
            "accelerate launch and mp.spawn end the group when a worker exits with an error) or plain (nothing "
            "ends the peers: srun without --kill-on-bad-exit, a launcher of your own)", choices=LAUNCHERS),
    Setting("save", str, "second", "the save to break: first, second, last or its step number", rule=_save_rule),
    Setting("faults", tuple, DEFAULT_FAULTS, "fault kinds injected at every point of the save (by default, after "
            "the last save also a delay: its bugs are races between ranks)", choices=tuple(KINDS)),
    Setting("corruptions", tuple, DEFAULT_CORRUPTIONS, "damage done to each file of the committed save "
            f"({UNSAFE_PICKLE}: replace it by a pickle that runs code when loaded)",
            choices=tuple(CORRUPTIONS)),
    Setting("ops", tuple, (), "only points of these operations (default: every operation)", choices=OPS),
    Setting("after", bool, None, "also cut power right after the save returned (default: when power-loss "
                                 "is among the faults)", rule=_after_rule, optional=True),
    Setting("durability", str, "strict", "power-loss model for directory entries", choices=("strict", "ordered")),
    Setting("delay", float, BY_NAME["delay"].seconds, "seconds of a delay fault", positive=True),
    Setting("grace", float, BY_NAME["preempt"].seconds, "seconds a preempt fault's notice (SIGTERM to every rank) "
            "leaves before SIGKILL ends what is left: Slurm's KillWait, Kubernetes' terminationGracePeriodSeconds",
            positive=True),
    Setting("hang_timeout", float, 3.0,
            f"seconds the peers of a rank blocked for good by a fault ({', '.join(BLOCKING)}) get to fail, "
            "from the moment it blocked", positive=True),
    Setting("parallel", int, 2, "cases run at once", low=1, replayed=False),
    Setting("max_cases", int, None, "run at most N of the exploration's cases, chosen to cover every rank, phase, "
            "operation and fault kind before repeating one (the same N for the same plan); the report names "
            "those left out and the command that runs them", low=1, optional=True, replayed=False),
    Setting("derive_states", bool, True, "take the directory a power loss, or a crash no peer notices, leaves "
                                         "from the golden run's trace instead of running the faulted save",
            replayed=False),
    Setting("script", str, None, "script mode: the training script and its arguments, as after `python` "
                                 "(a file, -m MODULE, or a console script on PATH), with {ckpt_dir} where the "
                                 "run's checkpoint directory goes, also inside a config file it names (e.g. "
                                 "'train.py --output_dir {ckpt_dir}'), {ckpt_url} where its URL goes (the "
                                 "bucket's prefix on --storage s3, the directory on local storage), and "
                                 "{local_rank} where each worker's "
                                 "local rank goes (deepspeed's launcher passes --local_rank=N); run under "
                                 "torchrun instead of a job",
            optional=True),
    Setting("resume_args", str, "", "script mode: arguments added last to a run that starts on a checkpoint "
                                    "directory holding anything, for a script that resumes only when told "
                                    "(e.g. '--init_from=resume')"),
    Setting("script_args", tuple, (), "script mode: how the script is told a setting a scenario sets, as "
            "NAME=ARGS with {} where the value goes (e.g. 'keep_last=--save_total_limit {},"
            "overwrite=--overwrite_output_dir'); a scenario's unset or false value adds nothing, a flag without {} "
            f"is added when true; NAME one of {', '.join(SCRIPT_ARGS)}; without one, a scenario that sets it is n/a",
            rule=_script_args_rule),
    Setting("pins", str, "", "script mode: the releases the script runs under, as after `pip install` (e.g. "
            "'lightning==2.5.2 torchdata>=0.8,<0.9'): torchrun and its workers run in an environment holding them, "
            "over this interpreter's packages (torch and the rest as they are), made once and kept in --envs-dir; "
            "empty: this interpreter's own", rule=_pins_rule),
    Setting("upgrade_from", str, "", "script mode: the releases a checkpoint is written under before a run under "
            "--pins resumes it, as after `pip install` (e.g. 'lightning==2.4.0'): the upgrade@K cases (scenario "
            "upgrade-safe) stop after save K under these and resume under --pins", rule=_pins_rule),
    Setting("find_links", str, "", "script mode: where --pins and --upgrade-from find packages besides the package "
            "index (pip's --find-links: wheel directories or pages of links, space-separated); PIP_NO_INDEX=1 "
            "keeps pip off the index"),
    Setting("envs_dir", str, "", "script mode: where the environments of --pins and --upgrade-from are made and "
            "kept, one per set of releases (empty: $XDG_CACHE_HOME/ckpt-harness/envs, else "
            "~/.cache/ckpt-harness/envs)", replayed=False),
    Setting("nproc_per_node", int, 1, "script mode: workers per node (torchrun --nproc-per-node)",
            low=1, high=MAX_WORLD_SIZE),
    Setting("nnodes", int, 1, "script mode: torchrun agents on this machine, each a node sharing its file "
                              "system (torchrun --nnodes)", low=1, high=MAX_WORLD_SIZE),
    Setting("checkpoint_layout", str, None, "script mode: the layout of the script's checkpoints, which "
            "conversions read (torch_save: torch.save files in a directory per save; dcp; deepspeed; hf_trainer; "
            "`ckpt-harness list` shows which conversions read which); unset, the convert and format-confusion "
            "scenarios are n/a",
            optional=True, rule=_layout_rule),
    Setting("keeps_best", bool, False, "script mode: the script's rotation also keeps one best checkpoint "
            "besides the newest (the Trainer's load_best_model_at_end, Lightning's ModelCheckpoint with a "
            "monitor): a keep-last N listing may then hold the newest N-1 and one older checkpoint (a Job says "
            "so with Job.keeps_best)"),
    Setting("max_restarts", int, 0, "script mode: times torchrun's agents restart the group after a "
                                    "worker fails (torchrun --max-restarts)", low=0),
    Setting("flake", int, None, "run the uninterrupted run N times, each judged as the golden run is, before "
            "the resume cases: a race between ranks that passes one run fails some of N (each run that fails is "
            "reported with its number)", low=2, optional=True, replayed=False),
    Setting("timelines", str, "failed", "which cases keep a timeline of their runs, rank by rank, for "
                                        "--timelines and --html: those that did not pass, or all",
            choices=("failed", "all"), replayed=False),
    Setting("share_resumes", bool, True, "resume each distinct post-fault directory once: cases that leave "
                                         "the same one are judged against one resume", replayed=False),
)}


def setting(name: str, default: Any = dataclasses.MISSING) -> Any:
    """A dataclass field declared by the setting `name` (optionally with another default)."""
    s = SETTINGS[name] if default is dataclasses.MISSING else SETTINGS[name].with_default(default)
    return dataclasses.field(default=s.default, metadata={"setting": s})


def settings_of(cls: type) -> dict[str, Setting]:
    """The settings a config class takes, with its defaults, in field order."""
    return {f.name: f.metadata["setting"] for f in dataclasses.fields(cls) if "setting" in f.metadata}


def check_settings(config: Any) -> None:
    """Every setting of the frozen dataclass `config` checked against its
    declaration and stored as checked (lists as tuples): the first thing each
    config does (`Setting.check` raises ConfigError saying what to give)."""
    for name, s in settings_of(type(config)).items():
        object.__setattr__(config, name, s.check(getattr(config, name)))


def check_run_settings(values: Mapping[str, Any]) -> None:
    """Rules between settings, shared by configs and scenario files."""
    steps, save_every = values.get("steps"), values.get("save_every")
    if steps is not None and save_every is not None and save_every > steps:
        raise ConfigError(f"save_every ({save_every}) must not exceed steps ({steps})")
    save = values.get("save")
    if isinstance(save, int) and steps is not None and save_every is not None and \
            save not in range(save_every, steps + 1, save_every):
        raise ConfigError(f"save {save} is not a save step; choose from "
                          f"{', '.join(map(str, range(save_every, steps + 1, save_every)))}")
    world, nodes = values.get("world_size"), values.get("nodes")
    if world is not None and nodes is not None and world % nodes:
        raise ConfigError(f"{nodes} simulated nodes cannot share {world} ranks evenly; "
                          "pick a node count that divides the world size")


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """Everything that defines a run of a job, so a repro line can replay it."""

    job: JobRef
    world_size: int = setting("world_size")
    steps: int = setting("steps")
    save_every: int = setting("save_every")
    keep_last: Optional[int] = setting("keep_last")
    overwrite: bool = setting("overwrite")
    seed: int = setting("seed")
    timeout: float = setting("timeout")
    backend: str = setting("backend")
    nodes: int = setting("nodes")
    save_spacing: float = setting("save_spacing")
    launcher: str = setting("launcher")
    cold_start: bool = setting("cold_start")
    precision: str = setting("precision")
    optimizer: str = setting("optimizer")
    data: str = setting("data")
    compile: bool = setting("compile")
    storage: str = setting("storage")

    def __post_init__(self) -> None:
        check_settings(self)
        check_run_settings(dataclasses.asdict(self))

    @property
    def axes(self) -> axes_mod.Axes:
        """What the job trains with beyond its model (`ckpt_harness.job.axes`), as its ranks receive it."""
        return axes_mod.Axes.of(self.values)

    @classmethod
    def build(cls, job: JobRef, **values: Any) -> "RunConfig":
        """From keyword arguments (Python API, pytest marker): unknown names are refused."""
        known = settings_of(cls)
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown setting {', '.join(unknown)}: {cls.__name__} takes {', '.join(known)}")
        return cls(job, **values)

    @property
    def save_steps(self) -> list[int]:
        return list(range(self.save_every, self.steps + 1, self.save_every))

    def replace(self, **changes: Any) -> "RunConfig":
        return dataclasses.replace(self, **changes)

    @property
    def values(self) -> dict[str, Any]:
        """Every setting by name, defaults included (what a report records)."""
        return {name: getattr(self, name) for name in settings_of(type(self))}


@dataclasses.dataclass(frozen=True)
class ScriptConfig:
    """An unmodified script under torchrun: what defines its runs (script mode)."""

    script: str = setting("script")
    script_args: tuple[str, ...] = setting("script_args")
    nproc_per_node: int = setting("nproc_per_node")
    nnodes: int = setting("nnodes")
    max_restarts: int = setting("max_restarts")
    checkpoint_layout: Optional[str] = setting("checkpoint_layout")
    keeps_best: bool = setting("keeps_best")
    resume_args: str = setting("resume_args")
    timeout: float = setting("timeout", 180.0)
    cold_start: bool = setting("cold_start")
    storage: str = setting("storage")
    pins: str = setting("pins")
    upgrade_from: str = setting("upgrade_from")
    find_links: str = setting("find_links")
    envs_dir: str = setting("envs_dir")

    def __post_init__(self) -> None:
        check_settings(self)
        if not self.script or not self.script.strip():
            raise ConfigError("script mode needs a script: give --script 'train.py ARGS' "
                              "with {ckpt_dir} where its checkpoint directory goes")
        if self.world_size > MAX_WORLD_SIZE:
            raise ConfigError(f"nnodes x nproc_per_node must be at most {MAX_WORLD_SIZE}, got {self.world_size}")

    @property
    def world_size(self) -> int:
        return self.nnodes * self.nproc_per_node

    @property
    def values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in settings_of(type(self))}


@dataclasses.dataclass(frozen=True)
class VerifyPlan:
    """How `run` runs its cases, whatever the target: which keep a timeline,
    and how many times the uninterrupted run is repeated to expose a race."""

    timelines: str = setting("timelines")
    flake: Optional[int] = setting("flake")

    def __post_init__(self) -> None:
        check_settings(self)


@dataclasses.dataclass(frozen=True)
class ExplorePlan:
    """What breaking one save adds to a target's runs, whatever the target:
    which save, which faults and corruptions, and how the cases are run.
    `explore`, the `faults` and `stall` checks and a matrix row all hand the
    pipeline a target and one of these."""

    save: Union[str, int] = setting("save")
    faults: tuple[str, ...] = setting("faults")
    corruptions: tuple[str, ...] = setting("corruptions")
    ops: tuple[str, ...] = setting("ops")
    after: Optional[bool] = setting("after")
    durability: str = setting("durability")
    delay: float = setting("delay")
    grace: float = setting("grace")
    hang_timeout: float = setting("hang_timeout")
    parallel: int = setting("parallel")
    max_cases: Optional[int] = setting("max_cases")
    derive_states: bool = setting("derive_states")
    share_resumes: bool = setting("share_resumes")
    timelines: str = setting("timelines")

    def __post_init__(self) -> None:
        check_settings(self)

    def broken(self, steps: Sequence[int]) -> int:
        """The step of the save this plan breaks among a target's save `steps`."""
        return broken_save(steps, self.save)

    @property
    def power_loss_after(self) -> bool:
        return self.after if self.after is not None else "power-loss" in self.faults

    def seconds(self, kind: str) -> Optional[float]:
        """How long a fault of `kind` lasts under this plan (`FaultKind.lasts`); None for a kind that does not."""
        lasts = BY_NAME[kind].lasts
        return getattr(self, lasts) if lasts is not None else None

    @property
    def values(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in settings_of(type(self))}

    def replace(self, **changes: Any) -> "ExplorePlan":
        return dataclasses.replace(self, **changes)

    @classmethod
    def of(cls, config: Any) -> "ExplorePlan":
        """The plan part of a config that breaks a save (`ExploreConfig`, `ScriptExploreConfig`)."""
        return cls(**{name: getattr(config, name) for name in settings_of(cls)})


@dataclasses.dataclass(frozen=True)
class ScriptExploreConfig(ExplorePlan, ScriptConfig):
    """A script whose save `save` is broken at every point (`explore --script`):
    the script's settings, then the plan's, as one set of options, marker
    keys and repro arguments (`ExplorePlan.of` takes the plan back out).

    A script's saves are its own: which steps it saves, and on which ranks,
    is known only once its golden run made them (`ScriptTarget.knowing`).
    """

    __post_init__ = ScriptConfig.__post_init__


def broken_save(steps: Sequence[int], save: Union[str, int]) -> int:
    """The step `save` names among the save `steps` (a step, or first/second/last)."""
    if isinstance(save, int):
        return save
    return {"first": steps[0], "second": steps[min(1, len(steps) - 1)], "last": steps[-1]}[save]


def save_before(steps: Sequence[int], k: int) -> Optional[int]:
    i = steps.index(k)
    return steps[i - 1] if i else None


@dataclasses.dataclass(frozen=True)
class ExploreConfig(ExplorePlan, RunConfig):
    """A run whose save `save` is broken at every point (see `explore`): the
    job's settings, then the plan's, as `ScriptExploreConfig` is a script's."""

    steps: int = setting("steps", 4)

    def __post_init__(self) -> None:
        RunConfig.__post_init__(self)


# -- the command line -------------------------------------------------------------------
def add_arguments(parser: argparse.ArgumentParser, cls: type, only: Optional[Sequence[str]] = None) -> None:
    """One option per setting of `cls`; unset options keep the class default."""
    for name, s in settings_of(cls).items():
        if only is not None and name not in only:
            continue
        kwargs: dict[str, Any] = {"dest": name, "default": argparse.SUPPRESS, "help": s.describe()}
        if s.kind is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        else:
            kwargs["type"] = _parser_of(s)
            kwargs["metavar"] = "LIST" if s.kind is tuple else name.upper()
            if s.kind is str and s.choices:
                kwargs["choices"] = s.choices
                kwargs.pop("metavar")
        parser.add_argument(s.option, **kwargs)


def option_type(s: Setting) -> Callable[[str], Any]:
    """What parses and checks the option of `s` (argparse's ``type=``; pytest's options too)."""
    return _parser_of(s)


def _parser_of(s: Setting) -> Callable[[str], Any]:
    """Parse and check one option's text, so argparse refuses a bad value at
    once (exit 2, naming the option) instead of after torch is imported."""
    if s.kind is tuple:
        parse: Callable[[str], Any] = lambda text: tuple(v.strip() for v in text.split(",") if v.strip())  # noqa: E731
    elif s.name == "save":
        parse = lambda text: int(text) if text.isdigit() else text  # noqa: E731
    elif s.kind is bool:  # bool("false") is True
        parse = _boolean
    else:
        parse = s.kind

    def parse_and_check(text: str) -> Any:
        try:
            value = parse(text)
        except ValueError:
            expected = {int: "an integer", bool: "true or false"}.get(s.kind, "a number")
            raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
        try:
            return s.check(value)
        except ConfigError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse_and_check.__name__ = s.kind.__name__  # what argparse names in its own messages
    return parse_and_check


def _boolean(text: str) -> bool:
    word = text.strip().lower()
    if word in ("true", "yes", "1", "on"):
        return True
    if word in ("false", "no", "0", "off"):
        return False
    raise ValueError(text)


def values_from(args: argparse.Namespace, cls: type) -> dict[str, Any]:
    """The settings of `cls` that were given on the command line, checked
    together with the defaults of the rest (`save_every` against `steps`...)."""
    known = settings_of(cls)
    given = {name: getattr(args, name) for name in known if hasattr(args, name)}
    check_run_settings({**{name: s.default for name, s in known.items()}, **given})
    return given


def shown(value: Any) -> str:
    """A setting's value as the command line takes it back exactly."""
    return repr(value) if isinstance(value, float) else str(value)


def cli_args(values: Mapping[str, Any], settings: Mapping[str, Setting]) -> list[str]:
    """Options that rebuild `values` from the defaults of `settings` (a
    command's table, as `settings_of` gives it): what a repro line passes."""
    args = []
    for name, s in settings.items():
        if name not in values:
            continue
        value = values[name]
        if not s.replayed or value == s.default:
            continue
        if s.kind is bool:
            args.append(s.option if value else f"--no-{s.option[2:]}")
        elif s.kind is tuple:
            args += [s.option, ",".join(value)]
        else:
            args += [s.option, shown(value)]
    return args
