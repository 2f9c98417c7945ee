"""A `Job` subclass on the warm fork server: the target the harness drives itself.

The harness owns the loop (`rankside.job`), so it knows the save steps up
front, hears where a resume started (`ctx.loaded`), can set rotation and
the overwrite flag, simulate nodes and park every rank where it wants.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from pathlib import Path
from typing import Any, ClassVar, Mapping, Optional

from ckpt_harness import jit, storage
from ckpt_harness.job.axes import missing, refused, row_name
from ckpt_harness.config import ExploreConfig, RunConfig, cli_args, settings_of, shown
from ckpt_harness.errors import BackendUnavailable, ConfigError, FrameworkMissing, UsageError
from ckpt_harness.jobref import load
from ckpt_harness.jobs import registry
from ckpt_harness.launch import GroupSpec, run_group
from ckpt_harness.records.runs import Run
from ckpt_harness.targets.base import BaseTarget, Capabilities, RunRequest, Stop, TargetKind

#: How a job's saves are seen (`Capabilities.marks_saves`).
MARKS_SAVES = ("a job's save is its `save` method; a job that owns its loop calls ctx.phase(f'save {step}') as a "
               "save starts and ctx.saved(step) once it returned")
#: Run settings a bench fixes for all its scenarios: a scenario never sets them.
BENCH = ("world_size", "timeout")
#: Why a Job has no stop between saves (`Capability.STOPS_BETWEEN`).
STOPS_AT_SAVES = ("a Job's run is stopped only right after one of its saves (resume-every-save): nothing counts its "
                  "optimizer steps to stop it between them; stops between saves are a script's (run --script, "
                  "--case between@K)")


@dataclasses.dataclass(frozen=True)
class JobTarget(BaseTarget):
    config: RunConfig
    #: Each command's settings, whose defaults a repro line leaves out.
    COMMANDS: ClassVar[Mapping[str, type]] = {"run": RunConfig, "explore": ExploreConfig}
    noun: ClassVar[str] = "job"

    @property
    def name(self) -> str:
        return self.config.job.display

    @property
    def row(self) -> str:
        return row_name(self.name, self.config.axes)

    @property
    def world_size(self) -> int:
        return self.config.world_size

    @property
    def timeout(self) -> float:
        return self.config.timeout

    @functools.cached_property
    def job_class(self) -> type:
        return load(self.config.job)

    @functools.cached_property
    def caps(self) -> Capabilities:
        cls = self.job_class
        lacks = {"launcher_restart": "a Job's group is run by the harness's fork server, which restarts nothing "
                                     "(torchrun's restart path is a script's: run --script --max-restarts)"}
        if not cls.saves_in_background():
            lacks["background_saves"] = (
                "the job saves synchronously: a save has landed when it returns, so no writer of it is in flight "
                "for a stop not to wait for (its hard stop is the graceful one, resume-every-save), for training "
                "to overlap, or to freeze")
        if not cls.reshardable():
            lacks["full_state"] = "the job defines no full_state(ctx), so it claims no world-size change"
        lacks["stops_between"] = STOPS_AT_SAVES
        lacks["upgrade"] = ("a Job's ranks are forked from the harness's own interpreter, with its releases: run the "
                            "training as a script (--script) with --upgrade-from and --pins")
        if cls.checkpoint_layout is None:
            lacks["conversions"] = ("the job names no checkpoint_layout, so no conversion claims to read its "
                                    "checkpoints (set Job.checkpoint_layout; `ckpt-harness list` shows them)")
        lacks.update(self.storage.lacks)
        return Capabilities(reports=True, steps_known=True, live_state=True, parks=True, lacks=lacks,
                            layout=cls.checkpoint_layout, keeps_best=cls.keeps_best, marks_saves=MARKS_SAVES)

    @property
    def values(self) -> dict[str, Any]:
        return self.config.values

    def preflight(self) -> None:
        """Refuse axes the job does not train with, and a backend this machine
        cannot run, before any group is started."""
        problems = refused(self.name, self.job_class.axes, self.config.axes)
        if problems:
            raise ConfigError("; ".join(problems))
        absent = missing(self.config.axes)
        if absent:
            hints = " ".join(repr(h) for h in sorted(set(absent.values())))
            raise FrameworkMissing(f"job {self.name} at {self.config.axes.label} needs {', '.join(sorted(absent))}, "
                                   f"which is not installed here: pip install {hints}")
        if self.config.backend != "nccl":
            return
        import torch

        found = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if found < self.world_size:
            raise BackendUnavailable(
                f"backend nccl needs {self.world_size} CUDA devices, found {found}; use backend='gloo'")

    def warm(self, parallel: int) -> None:
        from ckpt_harness.launch import prestart

        prestart(parallel)

    def run(self, request: RunRequest, ckpt_dir: Path, run_dir: Path) -> Run:
        """One group on `ckpt_dir` as its storage mounts it (a bucket's objects brought back in when it ended)."""
        if request.stop is Stop.CRASH:
            raise UsageError(f"job {self.name}: {self.caps.lacks['launcher_restart']}")
        jit.ensure_built(self.job_class.jit_ops())  # before the deadline starts: a build is not the job's time
        with self.storage.mount(ckpt_dir) as mount:
            return Run.collect(request.name, run_dir, run_group(self._spec(request, ckpt_dir, run_dir, mount)))

    def _spec(self, request: RunRequest, ckpt_dir: Path, run_dir: Path, mount: storage.Mount) -> GroupSpec:
        from ckpt_harness.rankside.job import RunPlan  # the rank-side payload

        config, cls = self.config, self.job_class
        plan = RunPlan(
            job=config.job, ckpt_dir=str(ckpt_dir), ckpt_url=mount.url, seed=config.seed, total_steps=config.steps,
            save_every=config.save_every, keep_last=config.keep_last, overwrite=config.overwrite,
            save_spacing=config.save_spacing,
            stop_after_save=request.stop_after_save, hard_stop=request.stop is Stop.HARD,
            slow_writer=request.stop is Stop.SLOW_WRITER, faults=request.faults,
            log_data=request.log_data, trace_files=request.trace_files, full_state=request.full_state,
            axes=config.axes,
        )
        return GroupSpec(
            world_size=config.world_size, entry="ckpt_harness.rankside.job:run_rank", payload=plan, run_dir=run_dir,
            deadline=request.deadline or config.timeout, backend=config.backend, nodes=config.nodes,
            preload=(*cls.preload, *mount.preload), env={**cls.env, **mount.env},
            failure_grace=request.failure_grace, blocked_grace=request.blocked_grace,
            warmup=("ckpt_harness.rankside.job:warm_up", (config.job, config.world_size, config.seed))
            # the template warms the training's default code paths; other training axes may start workers or
            # compile (where the checkpoints go is not one: the warm-up saves nothing)
            if cls.warm_start and config.backend == "gloo" and not config.axes.training_varied() else None,
            warm_children=not config.cold_start,
        )

    def knowing(self, golden: Run) -> "JobTarget":
        return self  # a Job's saves are known from its settings

    def save_steps(self) -> Optional[list[int]]:
        return self.config.save_steps

    def savers(self, step: int) -> Optional[frozenset[int]]:
        return None

    def saves_in_background(self) -> bool:
        return self.job_class.saves_in_background()

    def with_settings(self, params: Mapping[str, Any]) -> "JobTarget":
        takes = settings_of(RunConfig)
        return self.replace(**{name: value for name, value in params.items() if name in takes and name not in BENCH})

    def replace(self, **changes: Any) -> "JobTarget":
        return JobTarget(self.config.replace(**changes)) if changes else self

    def cli_args(self, command: str, plan: Mapping[str, Any] = {}) -> list[str]:
        settings = settings_of(self.COMMANDS.get(command, RunConfig))
        return ["--job", self.name, *cli_args({**self.values, **plan}, settings)]

    def bench_args(self) -> list[str]:
        """What `ckpt-harness scenario` takes to run on this target again (a bench's world size and timeout)."""
        axes = cli_args(self.config.axes.varied(), settings_of(RunConfig))
        return ["--job", self.name, *axes, "--world-size", shown(self.world_size), "--timeout", shown(self.timeout)]

    def shell(self, args: list[str]) -> str:
        """`ckpt-harness ARGS` as a shell line that finds the job where it is importable."""
        root = self.config.job.root
        return (f"PYTHONPATH={shlex.quote(root)} " if root else "") + shlex.join(["ckpt-harness", *args])


def _config(value: Any, cls: type, settings: Mapping[str, Any]) -> RunConfig:
    """A job's config: `value` a job (a Job subclass, a name, module:Class) or a matrix row of one
    (``dcp[bf16]``: its axes as settings, which settings given by name override). An axis whose
    default the job does not train with (`Job.axes`) is at the first value the job lists."""
    from ckpt_harness.jobref import resolve
    from ckpt_harness.job.axes import VALUES, split_row

    name, axes = split_row(value) if isinstance(value, str) else (value, {})
    ref, job = resolve(name)
    own = {axis: values[0] for axis, values in job.axes.items() if VALUES[axis][0] not in values}
    return cls.build(ref, **{**own, **axes, **settings})


KIND = TargetKind("job", "job", f"a registered job ({', '.join(registry())}) or module:Class",
                  {"run": RunConfig, "explore": ExploreConfig},
                  _config, lambda config: JobTarget(RunConfig(**{f.name: getattr(config, f.name)
                                                                  for f in dataclasses.fields(RunConfig)})),
                  whole_catalogue=True)
