"""An unmodified training script under torchrun: the target the harness only watches.

The script is run by torch's elastic agents (`launch.elastic`), with
``{ckpt_dir}`` in its command replaced by the run's checkpoint directory
(also in the environment, `CKPT_DIR_ENV`), and recorded by the worker
bootstrap (`rankside.script`): its saves are found at the entry points it
calls, with what it handed them. So what a Job declares, a script's golden
run tells (`knowing`): which steps it saves, on which ranks, whether a save
lands in the background. What the harness cannot set for a script (its
rotation, its overwrite flag, its backend...) are capabilities it lacks,
each with the reason an n/a cell gives.
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

from ckpt_harness.config import ScriptConfig, ScriptExploreConfig, cli_args, settings_of
from ckpt_harness.errors import UsageError
from ckpt_harness.records import Kind, Run, save_steps, savers
from ckpt_harness.targets.base import Capabilities, NotApplicable, RunRequest, Stop, TargetKind, repro_line

PLACEHOLDER = "{ckpt_dir}"
#: A Job run's shape, which a script's own arguments set: a scenario's values are not used.
SHAPE = ("steps", "save_every", "seed")
#: Why a Job setting a scenario sets makes it n/a for a script (others: generic).
JOB_ONLY = {
    "keep_last": "a script keeps its checkpoints by its own arguments, which a scenario cannot set "
                 "(give them in --script)",
    "rotates": "it needs a save that rotates out the previous one through keep_last, a Job's setting",
    "nodes": "simulated nodes are a Job's; a script gets real ones from --nnodes",
    "overwrite": "the harness cannot set a script's overwrite flag",
    "backend": "a script picks its own backend in init_process_group",
    "launcher": "a script runs under torchrun, whose agent ends the group when a worker exits with an error "
                "(launcher = elastic)",
}
#: What a script cannot do, and why (`Capabilities.lacks`).
LACKS = {
    "hard_stop": "a script's run stops where a save returns, and script mode cannot tell a background save from "
                 "a synchronous one: give the job as a Job for a hard stop",
    "full_state": "a script exposes no state that is the same at every world size (Job.full_state: the unsharded "
                  "model and optimizer, compared between world sizes)",
    "overwrite_flag": "the harness cannot set a script's overwrite flag, the job's ctx.overwrite this saves with on "
                      "and off (pass it in --script and run `run --script` on an output directory that holds a "
                      "checkpoint)",
    "blocked_report": "a torchrun worker cannot report the moment it blocked (no status pipe), from which its peers "
                      "get hang_timeout seconds, so it would count from the start, and a torchrun run spends longer "
                      "starting fresh interpreters (use `explore --script --save last --faults hang`, whose deadline "
                      "is a script's)",
    **{name: why for name, why in (("keep_last", JOB_ONLY["keep_last"]), ("simulated_nodes", JOB_ONLY["nodes"]),
                                   ("backend", JOB_ONLY["backend"]))},
}
#: The longest row name before it is cut.
NAME_LENGTH = 80


def command(script: str, ckpt_dir: Path) -> tuple[str, ...]:
    """The script's path and arguments with the checkpoint directory in place."""
    words = _words(script)
    return tuple(w.replace(PLACEHOLDER, str(ckpt_dir)) for w in words)


def _words(script: str) -> list[str]:
    words = shlex.split(script)
    if words and Path(words[0]).name.startswith("python") and len(words) > 1:
        words = words[1:]  # 'python train.py ...' means train.py
    return words


def row_name(script: str, limit: int = NAME_LENGTH) -> str:
    """The script's command as a row of the matrix: its file's name, then its
    arguments, cut to `limit`. Left out: its directories, a leading
    ``python``, and the checkpoint directory (with the option naming it),
    which every row has and which tells rows nothing apart."""
    words = _words(script)
    if words:
        words[0] = Path(words[0]).name
    kept: list[str] = []
    for word in words:
        if PLACEHOLDER in word:
            if kept and kept[-1].startswith("-") and "=" not in kept[-1] and len(kept) > 1:
                kept.pop()  # --output_dir {ckpt_dir}
            continue
        kept.append(word)
    name = " ".join(kept)
    return name if len(name) <= limit else name[: limit - 1] + "…"


@dataclasses.dataclass(frozen=True)
class ScriptTarget:
    config: ScriptConfig
    #: step -> the ranks that made that save in the golden run (`knowing`).
    saved_by: tuple[tuple[int, frozenset[int]], ...] = ()
    #: Whether a save of the golden run went on writing after it returned.
    background: bool = False
    #: The golden run told the above.
    known: bool = False
    COMMANDS: ClassVar[Mapping[str, type]] = {"run": ScriptConfig, "explore": ScriptExploreConfig}
    noun: ClassVar[str] = "script"

    @property
    def name(self) -> str:
        return self.config.script

    @property
    def row(self) -> str:
        return row_name(self.config.script)

    @property
    def world_size(self) -> int:
        return self.config.world_size

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @property
    def caps(self) -> Capabilities:
        lacks = dict(LACKS)
        if not self.config.max_restarts:
            lacks["launcher_restart"] = "torchrun restarts the group only with --max-restarts 1 or more"
        return Capabilities(reports=False, steps_known=False, live_state=False, parks=False, lacks=lacks)

    @property
    def values(self) -> dict[str, Any]:
        return self.config.values

    def preflight(self) -> None:
        """Refuse a script that is not there, before any run: else every case
        (every scenario of a matrix row) would say so, for bad input."""
        path = command(self.config.script, Path("ckpt"))[0]
        if not Path(path).is_file():
            raise UsageError(f"no script at {path!r} (--script {self.config.script!r}): give the path of a Python "
                              "file to run, then its arguments")

    def warm(self, parallel: int) -> None:
        from ckpt_harness.launch.agent import prestart

        prestart()  # the agents' torch, imported once while the harness starts up; workers start fresh

    def run(self, request: RunRequest, ckpt_dir: Path, run_dir: Path) -> Run:
        """One torchrun run on `ckpt_dir`. A run stopped after save k stops the
        ranks that made it in the golden run; with `Stop.CRASH` the first rank
        there dies instead and the run goes on under torchrun's restarts (the
        records are the last attempt's). torchrun's workers have no status
        pipe to report a block through: a blocked grace counts from the
        group's start, as a deadline."""
        from ckpt_harness.launch.elastic import ScriptSpec, run_elastic
        from ckpt_harness.rankside.script import CKPT_DIR_ENV, PLAN_ENV, ScriptPlan

        if request.stop is Stop.HARD:
            raise UsageError(f"a hard stop: {LACKS['hard_stop']}")
        crash = request.stop is Stop.CRASH
        ckpt_dir.mkdir(parents=True, exist_ok=True)
        ckpt = ckpt_dir.resolve()
        plan = ScriptPlan(ckpt_dir=str(ckpt), stop_after_save=request.stop_after_save, crash=crash,
                          faults=request.faults, log_data=request.log_data, trace_files=request.trace_files)
        stop_ranks = self.savers(request.stop_after_save) if request.stop_after_save is not None else None
        spec = ScriptSpec(
            command=command(self.config.script, ckpt), run_dir=run_dir,
            deadline=request.deadline or request.blocked_grace or self.config.timeout,
            nproc_per_node=self.config.nproc_per_node, nnodes=self.config.nnodes,
            max_restarts=self.config.max_restarts, env={PLAN_ENV: plan.to_env(), CKPT_DIR_ENV: str(ckpt)},
            failure_grace=request.failure_grace, stop_ranks=None if crash else stop_ranks,
            entry="ckpt_harness.rankside.script:arm",
        )
        return Run.collect(request.name, run_dir, run_elastic(spec))

    def knowing(self, golden: Run) -> "ScriptTarget":
        saved_by = tuple((step, savers(golden, step)) for step in save_steps(golden))
        background = any(rec["event"] == Kind.SAVED and rec.get("background")
                         for r in golden.ranks for rec in r.records)
        return dataclasses.replace(self, saved_by=saved_by, background=background, known=True)

    def save_steps(self) -> Optional[list[int]]:
        return [step for step, _ in self.saved_by] if self.known else None

    def savers(self, step: Optional[int]) -> Optional[frozenset[int]]:
        return dict(self.saved_by).get(step) if step is not None else None

    def saves_in_background(self) -> bool:
        return self.background

    def with_settings(self, params: Mapping[str, Any]) -> "ScriptTarget":
        """The script's own arguments set its shape (`SHAPE`, ignored); any
        other Job setting a scenario sets to other than its default is n/a."""
        from ckpt_harness.config import SETTINGS

        job_only = [name for name, value in params.items()
                    if name in JOB_ONLY and name in SETTINGS and value != SETTINGS[name].default
                    or name == "rotates" and value]
        if job_only:
            given = ", ".join(f"{name} = {_toml(params[name])}" for name in job_only)
            reasons = "; ".join(dict.fromkeys(JOB_ONLY[name] for name in job_only))
            raise NotApplicable(f"it sets {given}, which only a Job takes: {reasons}")
        return self

    def replace(self, **changes: Any) -> "ScriptTarget":
        takes = settings_of(ScriptConfig)
        other = sorted(set(changes) - set(takes))
        if other:
            raise NotApplicable(f"a script's {', '.join(other)} are its own arguments, which the harness cannot set")
        return dataclasses.replace(self, config=dataclasses.replace(self.config, **changes)) if changes else self

    def plan_defaults(self) -> Mapping[str, Any]:
        # A torchrun run starts fresh interpreters: seconds before the save is reached.
        return {"hang_timeout": settings_of(ScriptExploreConfig)["hang_timeout"].default}

    def cli_args(self, command: str, plan: Mapping[str, Any] = {}) -> list[str]:
        return cli_args({**self.values, **plan}, settings_of(self.COMMANDS.get(command, ScriptConfig)))

    def bench_args(self) -> list[str]:
        """What `ckpt-harness scenario` takes to run on this target again."""
        return self.cli_args("run")

    def repro(self, command: str, plan: Mapping[str, Any] = {}, case: Optional[str] = None) -> str:
        return repro_line(self, command, plan, case)

    def shell(self, args: list[str]) -> str:
        """`ckpt-harness ARGS` as a shell line (the script's path is in its own --script)."""
        return shlex.join(["ckpt-harness", *args])


def _toml(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else repr(value)


KIND = TargetKind("script", "script", "a training script and its arguments, run under torchrun",
                  {"run": ScriptConfig, "explore": ScriptExploreConfig},
                  lambda value, cls, settings: cls(**{**settings, "script": value}),
                  lambda config: ScriptTarget(ScriptConfig(**{name: getattr(config, name)
                                                               for name in settings_of(ScriptConfig)})))
