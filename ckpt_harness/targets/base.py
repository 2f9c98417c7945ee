"""What every target is: the seam between the thing under test and the pipelines that judge it.

A `Job` on the warm fork server and an unmodified script under torchrun
differ in how they are started, what they can report and what the harness
can set for them; they do not differ in what is asked of them. So the
pipelines, checks, benches, the matrix and both surfaces hold a `Target`
and ask it: run this (`RunRequest`), which steps did you save, how do I
replay you. What a target cannot do is a capability it lacks, with the
reason a user reads in an n/a cell (`Capabilities.lacks`), never a branch
on its class. This is DCP's split of a storage writer from the planner,
and torch elastic's `start_processes` taking a function or a binary behind
one `PContext`.
"""

from __future__ import annotations

import dataclasses
import enum
import shlex
from pathlib import Path
from typing import Any, Callable, ClassVar, Mapping, Optional, Protocol, runtime_checkable

from ckpt_harness.config import cli_args, settings_of
from ckpt_harness.storage import Storage
from ckpt_harness.storage import of as storage_of

from ckpt_harness.inject.faults import Fault
from ckpt_harness.records.runs import Run

#: How long peers of a failed rank get to fail too in a case before the run
#: counts as stuck; also the budget of the *live* property.
PROPAGATION = 1.0
#: The same for runs that only set the stage (golden, stopped runs).
FAILURE_GRACE = 5.0


class Stop(enum.Enum):
    """How a run told to stop after a save ends there."""

    #: Every rank that made the save stops once it returned (and, for a job
    #: saving in the background, once that save landed): a preemption.
    GRACEFUL = "graceful"
    #: At once, the background save still in flight (`Capabilities` "background_saves").
    HARD = "hard"
    #: The save's writers start only once training went on past it (an
    #: optimizer step after the hand-over), as on storage slower than a
    #: training step; the ranks train on to their next save (or the end)
    #: and stop there once the save landed. What a writer reads of the live
    #: state after the save returned is then another step's (`Capabilities`
    #: "background_saves").
    SLOW_WRITER = "slow-writer"
    #: The first rank there dies, and the launcher restarts the group
    #: (`Capabilities` "launcher_restart").
    CRASH = "crash"


@dataclasses.dataclass(frozen=True)
class RunRequest:
    """One run of a target, as the pipelines ask for it."""

    #: What the run is for ("golden", "stopped run", ...): its reports name it.
    name: str
    #: Stop right after this save (see `stop`); None runs to the end.
    stop_after_save: Optional[int] = None
    stop: Stop = Stop.GRACEFUL
    #: Stop between saves instead, where the K+1th optimizer step would start
    #: (K made): a preemption after a step that wrote nothing (capability "stops_between").
    stop_between: Optional[int] = None
    #: Armed in the run, each firing once.
    faults: tuple[Fault, ...] = ()
    #: Log every byte written under the checkpoint directory (the power-loss model).
    log_data: bool = False
    #: Probe file operations too; runs whose file trace nobody reads skip them.
    trace_files: bool = True
    #: Record the world-size independent state too (capability "full_state").
    full_state: bool = False
    #: Seconds the run may take; None: the target's own timeout.
    deadline: Optional[float] = None
    #: Once a rank failed, how long its peers get to fail too.
    failure_grace: float = FAILURE_GRACE
    #: Once a rank reported that an armed fault blocked it for good, how long
    #: its peers get; None: only the deadline cuts the run.
    blocked_grace: Optional[float] = None
    #: Run under the releases the target upgrades from (capability "upgrade"),
    #: not its own: the run that writes the checkpoint an upgrade@K case resumes.
    before_upgrade: bool = False


class Capability(str, enum.Enum):
    """What a target may be unable to do. A check declares the ones it needs
    (`requires`) and is n/a, with the target's reason, on a target lacking
    one (`Capabilities.lacks`). A name that is none of these is refused
    where it is declared (a check's `requires`, a target's `lacks`) and
    where it is asked (`Capabilities.has`): an unknown name would otherwise
    count as one every target has."""

    #: A save may go on landing after it returned (an async checkpoint): its writers can be stopped or frozen.
    BACKGROUND_SAVES = "background_saves"
    #: The launcher restarts a failed group (torchrun's --max-restarts), which resumes by itself.
    LAUNCHER_RESTART = "launcher_restart"
    #: It declares a state that is the same at every world size (a world-size change can be judged).
    FULL_STATE = "full_state"
    #: That full state is keyed as its checkpoints are, so a conversion is held to it.
    FULL_STATE_KEYS = "full_state_keys"
    #: The harness can set its overwrite flag.
    OVERWRITE_FLAG = "overwrite_flag"
    #: The harness can set how many checkpoints its rotation keeps.
    KEEP_LAST = "keep_last"
    #: The harness can pick its process group's backend.
    BACKEND = "backend"
    #: It names the layout of its checkpoints, which conversions read.
    CONVERSIONS = "conversions"
    #: A power loss of the writers' machines can take something of its checkpoints (not: a bucket).
    POWER_LOSS = "power_loss"
    #: A run can be stopped between saves, after an optimizer step that wrote nothing (`RunRequest.stop_between`).
    STOPS_BETWEEN = "stops_between"
    #: It runs under named releases and has older ones to write a checkpoint under (`RunRequest.before_upgrade`).
    UPGRADE = "upgrade"


def capability(name: str) -> Capability:
    """The capability `name` names; UsageError, saying which there are, for another name."""
    try:
        return Capability(name)
    except ValueError:
        from ckpt_harness.errors import UsageError, did_you_mean

        known = [c.value for c in Capability]
        raise UsageError(f"no capability {name!r}{did_you_mean(str(name), known)}: a target may lack "
                         f"{', '.join(known)} (ckpt_harness.targets.Capability)") from None


@dataclasses.dataclass(frozen=True)
class Capabilities:
    """What a target can do; for each thing it cannot (a `Capability`), why, in a user's words."""

    #: It tells the harness where a resume started (`ctx.loaded`) and when a
    #: background save was published (`ctx.published`); else the start is
    #: inferred from what the resumed run did, and no save counts as published.
    reports: bool
    #: Its save steps are known before its golden run (else the golden run tells).
    steps_known: bool
    #: Its final state is its live state at the end (a Job's `state`), not
    #: what it handed its last save (a script's): a rank that saves nothing
    #: after a resume still ends in a state that can be compared.
    live_state: bool
    #: A run stopped after save k parks every rank as that save ends, so what
    #: it leaves is the golden trace cut there (a script's ranks go on to
    #: their next save until the group is torn down).
    parks: bool
    lacks: Mapping[str, str] = dataclasses.field(default_factory=dict)
    #: The layout of its checkpoints, which conversions read (`Job.checkpoint_layout`);
    #: None when it names none (capability "conversions" lacking, with why).
    layout: Optional[str] = None
    #: Its rotation also keeps one best checkpoint (`Job.keeps_best`, `--keeps-best`).
    keeps_best: bool = False
    #: What it does so that the harness sees its saves, in its own words: what
    #: a report says when a run made none, or a save did nothing to break.
    marks_saves: str = "its saves must be ones the harness sees (docs/extending.md, \"Add a kind of target\")"

    def __post_init__(self) -> None:
        for name in self.lacks:
            capability(name)

    def has(self, name: str) -> bool:
        return capability(name) not in self.lacks


class NotApplicable(Exception):
    """The scenario does not apply to this target; the message says why."""


@runtime_checkable
class Target(Protocol):
    """The thing under test and how it is started; picked by `targets.resolve`."""

    #: What a report is about: a job's name, a script's command.
    name: str
    #: Its row in a matrix (a script's command without directories).
    row: str
    #: What reports call it: "job", "script".
    noun: str

    @property
    def world_size(self) -> int: ...

    @property
    def timeout(self) -> float: ...

    @property
    def caps(self) -> Capabilities: ...

    @property
    def values(self) -> dict[str, Any]:
        """Every setting of the target by name, defaults included (what a report records)."""

    def preflight(self) -> None:
        """Refuse what cannot run here (UsageError, Unavailable), before any run."""

    def breakable(self) -> "Target":
        """Itself, as the pipelines that break its saves on purpose run it
        (`explore`, a bench: a matrix row, a catalogue item), each resume run
        by the harness; UsageError for a setting that cannot be so run."""

    def warm(self, parallel: int) -> None:
        """Start what its runs share before the first one (the fork server), so
        that no run's deadline pays for it."""

    def run(self, request: RunRequest, ckpt_dir: Path, run_dir: Path) -> Run:
        """One group run on `ckpt_dir`, recorded under `run_dir`; its records, trace and outcome."""

    def knowing(self, golden: Run) -> "Target":
        """This target once its golden run made its saves (steps, savers, background)."""

    def save_steps(self) -> Optional[list[int]]:
        """The steps it saves at; None until `knowing` told them."""

    def savers(self, step: int) -> Optional[frozenset[int]]:
        """The ranks that make save `step` (None: every rank)."""

    def saves_in_background(self) -> bool:
        """Does a save go on landing after it returned (an async checkpoint)?"""

    def with_settings(self, params: Mapping[str, Any]) -> "Target":
        """This target with a scenario's run settings (those it takes); raises
        `NotApplicable` for a setting it cannot honour."""

    def replace(self, **changes: Any) -> "Target":
        """This target with other run settings (world size, seed, overwrite...)."""

    def cli_args(self, command: str, plan: Mapping[str, Any] = {}) -> list[str]:
        """The options of `command` that rebuild this target (and `plan`), defaults left out."""

    def bench_args(self) -> list[str]:
        """The options of `ckpt-harness scenario` that run on this target again."""

    def repro(self, command: str, plan: Mapping[str, Any] = {}, case: Optional[str] = None) -> str:
        """The shell line that replays `case` of `command` on this target."""

    def shell(self, args: list[str]) -> str:
        """`ckpt-harness ARGS` as a shell line that finds this target where it is."""



@dataclasses.dataclass(frozen=True)
class TargetKind:
    """A kind of target as the surfaces offer it: the option that picks it,
    the settings each command takes with it, and how those become a target.
    The CLI's options, the plugin's and the one chooser
    (`targets.chosen`) are derived from the registered kinds, so a new kind
    of target is one module that defines one of these and registers it
    (entry-point group ``ckpt_harness.targets``)."""

    #: Its mode's name in messages ("job", "script").
    name: str
    #: The option whose value picks it (``--job``, ``--script``), by its dest.
    option: str
    #: What that option takes, for its help.
    help: str
    #: command ("run", "explore") -> the config class whose settings it takes.
    configs: Mapping[str, type]
    #: (the picked value, a config class of `configs`, settings) -> that config.
    make: Callable[[Any, type, Mapping[str, Any]], Any]
    #: A config of `configs` -> its target.
    target: Callable[[Any], "Target"]
    #: What ``pytest --ckpt-OPTION VALUE`` collects without --ckpt-scenarios: its whole scenario catalogue
    #: (True: a job, whose runs start warm), or its verification alone, the item ``ckpt-NAME::verify``
    #: (a script, whose every run is a cold torchrun: --ckpt-scenarios adds the scenarios it names).
    whole_catalogue: bool = False

    @property
    def flag(self) -> str:
        return "--" + self.option.replace("_", "-")


def repro_line(target: Target, command: str, plan: Mapping[str, Any] = {}, case: Optional[str] = None) -> str:
    """The one way a repro line is written: `ckpt-harness COMMAND`, the options
    that rebuild the target and the plan, the case, as the target's shell line."""
    return target.shell([command, *target.cli_args(command, plan), *(["--case", case] if case else [])])


class BaseTarget:
    """What a kind of target does unless it says otherwise: subclass it (a
    frozen dataclass holding its config) and define what differs.

    The pipelines call a target in this order, as DCP's planner calls a
    storage writer through ``set_up_storage_writer``, ``prepare_local_plan``,
    ``write_data``, ``finish``:

    1. `preflight` before anything runs (bad input, a framework not here);
    2. `warm` once, before the first run's deadline starts;
    3. `run` of the golden run, then `knowing(golden)`: the target as its
       golden run told it (`save_steps`, `savers`, `saves_in_background`
       answer from then on; before it, None where they cannot know);
    4. for each scenario, `with_settings(params)` (NotApplicable for what it
       cannot take) and `replace(...)` (world size, seed...), then `run`
       once per case and resume;
    5. `cli_args`, `repro` and `shell` for what reports print.

    What it must define: `name`, `noun` (its kind's name), `COMMANDS`
    (command -> its config class), `world_size`, `timeout`, `caps`,
    `values`, `run`, `replace` (and `with_settings` if a scenario's settings
    are not all its own). The rest defaults here."""

    #: What reports call it; its kind's name (`TargetKind.name`), which `targets.kind_of` finds it by.
    noun: ClassVar[str]
    #: command ("run", "explore") -> the config class whose settings it takes.
    COMMANDS: ClassVar[Mapping[str, type]]

    @property
    def row(self) -> str:
        return self.name  # type: ignore[attr-defined]

    @property
    def storage(self) -> Storage:
        """Where its checkpoints go (its `storage` setting; a directory when it has none): what a run
        mounts, and what a target whose checkpoints are there cannot do (`Storage.lacks`)."""
        return storage_of(self.values.get("storage", "local"))  # type: ignore[attr-defined]

    def preflight(self) -> None:
        """Nothing to refuse before a run."""

    def breakable(self) -> "Target":
        """Nothing it is set to do stands in the way of breaking its saves."""
        return self  # type: ignore[return-value]

    def warm(self, parallel: int) -> None:
        """Nothing shared between its runs to start."""

    def knowing(self, golden: Run) -> Any:
        return self

    def save_steps(self) -> Optional[list[int]]:
        return None

    def savers(self, step: int) -> Optional[frozenset[int]]:
        return None

    def saves_in_background(self) -> bool:
        return False

    def with_settings(self, params: Mapping[str, Any]) -> Any:
        """A scenario's settings that are its own (`COMMANDS["run"]`'s); the others ignored."""
        takes = settings_of(self.COMMANDS["run"])
        return self.replace(**{name: value for name, value in params.items() if name in takes})  # type: ignore

    def cli_args(self, command: str, plan: Mapping[str, Any] = {}) -> list[str]:
        """Its settings and `plan` as the options of `command` (its own config's), defaults left out."""
        return cli_args({**self.values, **plan},  # type: ignore[attr-defined]
                        settings_of(self.COMMANDS.get(command, self.COMMANDS["run"])))

    def bench_args(self) -> list[str]:
        return self.cli_args("run")

    def repro(self, command: str, plan: Mapping[str, Any] = {}, case: Optional[str] = None) -> str:
        return repro_line(self, command, plan, case)  # type: ignore[arg-type]

    def shell(self, args: list[str]) -> str:
        return shlex.join(["ckpt-harness", *args])
