"""The run layer: a config and what to arm become one finished group run.

Everything above it (verify, baselines, cases, checks) launches through
`launch` and reads the `Run` it returns; nothing above it builds a
`GroupSpec` or a rank payload. It also owns the work directory and the one
way a repro line is written.
"""

from __future__ import annotations

import shlex
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Sequence, Union

from ckpt_harness import jit
from ckpt_harness.config import RunConfig, ScriptConfig, cli_args
from ckpt_harness.errors import BackendUnavailable, UsageError
from ckpt_harness.inject.faults import Fault
from ckpt_harness.jobref import JobRef, load
from ckpt_harness.launch import GroupSpec, run_group
from ckpt_harness.records import Run

#: How long peers of a failed rank get to fail too in a case before the run
#: counts as stuck; also the budget of the *live* property.
PROPAGATION = 1.0
#: The same for runs that only set the stage (golden, stopped runs).
FAILURE_GRACE = 5.0


def launch(config: Union[RunConfig, ScriptConfig], name: str, ckpt_dir: Path, run_dir: Path, *,
           stop_after_save: Optional[int] = None, hard_stop: bool = False, faults: tuple[Fault, ...] = (),
           log_data: bool = False, trace_files: bool = True, full_state: bool = False, deadline: Optional[float] = None,
           failure_grace: float = FAILURE_GRACE, blocked_grace: Optional[float] = None) -> Run:
    """One group run of `config`'s job on `ckpt_dir`; its records, trace and outcome.

    `stop_after_save` parks every rank once that save returned (a preemption;
    with `hard_stop` at once, not waiting for a background save in flight);
    `faults` are armed; `log_data` keeps every byte written for the power-loss
    model; `trace_files` probes file operations (only runs whose file trace is
    read need it); `full_state` records `Job.full_state` too. Once a rank
    reports that an armed fault blocked it for good, its peers get
    `blocked_grace` seconds (`GroupSpec.blocked_grace`).

    A script config runs its script under torchrun instead (`script_mode`),
    armed alike: what is above the run layer does not tell the two apart.
    A script's state is what it hands its saves, so `full_state` has no
    meaning there; a preempted run stops the ranks that make that save.
    """
    if isinstance(config, ScriptConfig):
        from ckpt_harness.pipeline.script_mode import launch_script

        if hard_stop:
            raise UsageError("a hard stop is for jobs that save in the background; a script's stop is its own")

        # torchrun's workers have no status pipe to report a block through:
        # the grace is counted from the group's start, as a deadline.
        return launch_script(config, name, ckpt_dir, run_dir, stop_after_save=stop_after_save,
                             stop_ranks=config.stop_ranks(stop_after_save), faults=faults, log_data=log_data,
                             trace_files=trace_files, deadline=deadline or blocked_grace, failure_grace=failure_grace)
    from ckpt_harness.rankside.job import RunPlan  # the rank-side payload

    cls = load(config.job)
    jit.ensure_built(cls.jit_ops())  # before the deadline starts: a build is not the job's time
    plan = RunPlan(
        job=config.job, ckpt_dir=str(ckpt_dir), seed=config.seed, total_steps=config.steps,
        save_every=config.save_every, keep_last=config.keep_last, overwrite=config.overwrite,
        stop_after_save=stop_after_save, hard_stop=hard_stop, faults=faults, log_data=log_data,
        trace_files=trace_files,
        full_state=full_state,
    )
    spec = GroupSpec(
        world_size=config.world_size, entry="ckpt_harness.rankside.job:run_rank", payload=plan, run_dir=run_dir,
        deadline=deadline or config.timeout, backend=config.backend, nodes=config.nodes,
        preload=tuple(cls.preload), env=dict(cls.env), failure_grace=failure_grace, blocked_grace=blocked_grace,
        warmup=("ckpt_harness.rankside.job:warm_up", (config.job, config.world_size, config.seed))
        if cls.warm_start and config.backend == "gloo" else None,
    )
    return Run.collect(name, run_dir, run_group(spec))


def require_backend(config: RunConfig) -> None:
    """Refuse a backend this machine cannot run, before any group is started."""
    if config.backend != "nccl":
        return
    import torch

    found = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if found < config.world_size:
        raise BackendUnavailable(
            f"backend nccl needs {config.world_size} CUDA devices, found {found}; use backend='gloo'")


# -- repro lines ----------------------------------------------------------------------
def repro_line(job: JobRef, args: Sequence[str]) -> str:
    """A shell line that runs `ckpt-harness ARGS` where the job is importable."""
    prefix = f"PYTHONPATH={shlex.quote(job.root)} " if job.root else ""
    return prefix + shlex.join(["ckpt-harness", *args])


def repro(command: str, config: Union[RunConfig, ScriptConfig], case: str) -> str:
    """The line that replays exactly `case` of `command` under `config`."""
    if isinstance(config, ScriptConfig):  # the script's path is in its own --script
        return shlex.join(["ckpt-harness", command, *cli_args(config), "--case", case])
    return repro_line(config.job, [command, *cli_args(config), "--case", case])


# -- work directories -------------------------------------------------------------------
MARKER = ".ckpt-harness-workdir"


def prepare_workdir(workdir: Optional[Union[str, Path]]) -> Path:
    """An empty directory for runs: a new temporary one, or `workdir`.

    A workdir left by an earlier run of the harness (it holds our marker) is
    emptied, since stale traces or checkpoints would be read as this run's;
    any other non-empty directory is refused rather than touched.
    """
    if workdir is None:
        root = Path(tempfile.mkdtemp(prefix="ckpt-harness-"))
    else:
        root = Path(workdir)
        if root.exists() and not root.is_dir():
            raise UsageError(f"workdir {root} is a file; give a new or empty directory")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create workdir {root}: {exc.strerror}; give a directory you can write to") \
                from None
        entries = list(root.iterdir())
        if entries and not (root / MARKER).exists():
            raise UsageError(f"workdir {root} is not empty and was not made by ckpt-harness; "
                             "give a new or empty directory")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    try:
        (root / MARKER).write_text("made by ckpt-harness; its contents are replaced on the next run\n")
    except OSError as exc:
        raise UsageError(f"cannot write to workdir {root}: {exc.strerror}; give a directory you can write to") \
            from None
    return root


def fresh_dir(parent: Path, name: str) -> Path:
    """A new directory under `parent` whose name starts with `name`, unique
    without a counter (cases running in parallel each get their own)."""
    parent.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)[:60]
    return Path(tempfile.mkdtemp(prefix=f"{safe}-", dir=parent))
