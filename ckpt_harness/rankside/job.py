"""The rank side of a run: drive a Job and record what the oracle will judge.

This is the launcher's entry point for job runs. It seeds the RNGs, drives
`setup` → `load` → (`train_step`, `save`)* (or hands the loop to `run`),
captures `state` right after `load` and after every save returns, and
writes records to the rank's record file as it goes: a rank killed at any
moment leaves every record up to that moment.

A run may be told to stop right after save k returned on this rank: the
rank then parks where it is and the harness tears the group down once every
rank got there, the way a preemption ends a job. A job that saves in the
background (`Job.saves_in_background`) is stopped later: it trains on up to
its next save while save k is in flight (where an async save's staging and
its background writer are put to the test), then waits for its saves
(`wait_for_saves`, a graceful preemption) and parks. A *hard* stop
(`RunPlan.hard_stop`) parks every job right after save k returned, its
background save still in flight: the preemption that does not wait (a
node lost, a scheduler's SIGKILL), after which only what was published may
be relied on (`oracle.judge_hard_stop`). For a job that saves synchronously
the two stops are one.

For such a job a save has two moments: it *returned* (`Kind.SAVED`, the
state recorded then is what it must persist) and it was *published*
(`Kind.PUBLISHED`: the job's `ctx.published(step)`, or `wait_for_saves`
returning without error). The oracle accepts an older checkpoint after a
fault only for saves not yet published (`oracle.judges.judge_fault`).
"""

from __future__ import annotations

import dataclasses
import random
import time
from pathlib import Path
from typing import Optional

from ckpt_harness import phase
from ckpt_harness.job.axes import Axes
from ckpt_harness import state as state_mod
from ckpt_harness.inject import probes
from ckpt_harness.inject.faults import Fault
from ckpt_harness.inject.writers import WRITERS
from ckpt_harness.job import Job, RankContext
from ckpt_harness.jobref import JobRef, load
from ckpt_harness.launch import rank as launch_rank
from ckpt_harness.launch.layout import data_path, records_path, trace_path
from ckpt_harness.launch.rank import RankInfo
from ckpt_harness.rankside.common import entries, install_probes, write_error
from ckpt_harness.records import Kind, Recorder


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """What one group run does; the payload the launcher hands each rank."""

    job: JobRef
    ckpt_dir: str
    seed: int
    total_steps: int
    save_every: int
    keep_last: Optional[int] = None
    overwrite: bool = False
    #: Seconds to wait once a save returned (`save_spacing`): checkpoints that far apart in time.
    save_spacing: float = 0.0
    #: Park right after save k returned (a preemption); None runs to the end.
    stop_after_save: Optional[int] = None
    #: The preemption is hard: park at once, not waiting for the save in
    #: flight of a job that saves in the background (see the module docstring).
    hard_stop: bool = False
    #: Hold save k's writers until training went on past it (`Stop.SLOW_WRITER`):
    #: a job that saves in the background trains on to its next save while
    #: they wait, as after any stop of such a job, then waits for its saves.
    slow_writer: bool = False
    #: The faults armed in this run, each firing once.
    faults: tuple[Fault, ...] = ()
    #: Log every byte written under the checkpoint dir (for the power-loss model).
    log_data: bool = False
    #: Probe file operations too, not only collectives. Runs whose file trace
    #: nobody reads (fault-free verification, resumes) skip them.
    trace_files: bool = True
    #: Also record `full_state` after load and after every save (world-size change).
    full_state: bool = False
    #: What the job trains with (`RankContext.axes`).
    axes: Axes = dataclasses.field(default_factory=Axes)
    #: Where the job saves (`RankContext.ckpt_url`): the storage's mount of `ckpt_dir`.
    ckpt_url: str = ""


def run_rank(info: RankInfo, plan: RunPlan) -> None:
    """Launcher entry point: run `plan` as rank `info.rank`."""
    Path(plan.ckpt_dir).mkdir(parents=True, exist_ok=True)

    def child_paths(actor: str) -> tuple[str, Optional[str]]:
        return (str(trace_path(info.run_dir, info.rank, actor)),
                str(data_path(info.run_dir, info.rank, actor)) if plan.log_data else None)

    install_probes(info.run_dir, info.rank, plan, child_paths=child_paths)
    recorder = Recorder(records_path(info.run_dir, info.rank))
    try:
        _drive(info, plan, recorder)
    except BaseException as exc:
        write_error(recorder, exc)
        raise


def _drive(info: RankInfo, plan: RunPlan, recorder: Recorder) -> None:
    _seed_everything(plan.seed + info.rank)
    ckpt_dir = Path(plan.ckpt_dir)
    job: Job = load(plan.job)()
    probes.follow_children()  # processes its framework spawns to save get the probes too
    if plan.slow_writer and plan.stop_after_save is not None:
        WRITERS.hold(plan.stop_after_save)

    def on_loaded(step: Optional[int]) -> None:
        probes.set_phase(phase.STATE_AFTER_LOAD)
        recorder.write(Kind.LOADED, step=step, state=state_mod.capture(job.state(ctx)))
        if plan.full_state:
            recorder.write(Kind.LOADED_FULL, step=step, state=state_mod.capture(job.full_state(ctx)))

    def on_saved(step: int) -> None:
        saved.append(step)
        probes.set_phase(phase.state_after_save(step))
        # With rotation on, what the directory holds now: the retention check's evidence.
        listed = entries(ckpt_dir, plan.ckpt_url) if plan.keep_last is not None else None
        recorder.write(Kind.SAVED, step=step, state=state_mod.capture(job.state(ctx)), entries=listed)
        if plan.full_state:
            recorder.write(Kind.SAVED_FULL, step=step, state=state_mod.capture(job.full_state(ctx)))
        if plan.stop_after_save == step:
            if plan.hard_stop:
                recorder.write(Kind.STOPPED, step=step)
                launch_rank.park()
            if background and not job.owns_loop():
                stopping.append(step)  # trains on until the next save (see `_drive`'s loop)
            else:
                stop(step)
        # After the last save: the end-of-training work on checkpoints (deleting
        # old ones), a phase of its own. After any other save an owned loop
        # trains on, which is not checkpointing.
        last = plan.total_steps - plan.total_steps % plan.save_every
        probes.set_phase(phase.after_save(step) if step == last else phase.RUN)
        if plan.save_spacing and step != last:
            time.sleep(plan.save_spacing)

    published: list[int] = []

    def on_published(step: int) -> None:
        if step not in published:
            published.append(step)
            # A job that saves in the background rotates as it publishes: the retention check's evidence.
            listed = entries(ckpt_dir, plan.ckpt_url) if plan.keep_last is not None else None
            recorder.write(Kind.PUBLISHED, step=step, entries=listed)

    def wait_for_saves() -> None:
        """Every save that returned has landed once `wait_for_saves` returned
        without raising: the job says so by returning (one that swallows a
        failed background write says it falsely, which its resume shows)."""
        job.wait_for_saves(ctx)
        if saved:
            on_published(saved[-1])

    saved: list[int] = []
    background = job.saves_in_background()
    #: The step to stop after, once the background job trained on to its next save.
    stopping: list[int] = []

    def stop(step: int) -> None:
        WRITERS.release("stop")
        if background:
            probes.set_phase(phase.after_save(step))
            wait_for_saves()
        recorder.write(Kind.STOPPED, step=step, **({"held": WRITERS.released_by} if plan.slow_writer else {}))
        launch_rank.park()

    ctx = RankContext(
        rank=info.rank,
        world_size=info.world_size,
        local_rank=info.local_rank,
        node=info.node,
        seed=plan.seed,
        ckpt_dir=ckpt_dir,
        total_steps=plan.total_steps,
        save_every=plan.save_every,
        keep_last=plan.keep_last,
        overwrite=plan.overwrite,
        backend=info.backend,
        axes=plan.axes,
        ckpt_url=plan.ckpt_url or str(ckpt_dir),
        _on_loaded=on_loaded,
        _on_saved=on_saved,
        _on_phase=probes.set_phase,
        _on_published=on_published,
    )
    if job.owns_loop():
        probes.set_phase(phase.RUN)
        job.run(ctx)
    else:
        probes.set_phase(phase.SETUP)
        job.setup(ctx)
        probes.follow_children()  # a framework setup imported
        probes.set_phase(phase.LOAD)
        start = job.load(ctx)
        ctx.loaded(start)
        for step in range((start or 0) + 1, plan.total_steps + 1):
            if stopping and ctx.should_save(step):
                stop(stopping[0])
            probes.set_phase(phase.train_step(step))
            job.train_step(ctx, step)
            if ctx.should_save(step):
                probes.set_phase(phase.save(step))
                job.save(ctx, step)
                ctx.saved(step)
        if stopping:
            stop(stopping[0])
        if background:  # the end of training: the last save must land
            last = plan.total_steps - plan.total_steps % plan.save_every
            if probes.current_phase() != phase.after_save(last):
                probes.set_phase(phase.after_save(last))
            wait_for_saves()
    probes.set_phase(phase.FINAL_STATE)
    recorder.write(Kind.FINAL, state=state_mod.capture(job.state(ctx)))
    probes.set_phase(phase.TEARDOWN)
    job.teardown(ctx)
    recorder.write(Kind.FINISHED)



def _seed_everything(seed: int) -> None:
    import numpy as np
    import torch

    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def warm_up(argument: tuple[JobRef, int, int], rank: int) -> None:
    """Template warm-up for `Job.warm_start` jobs: `setup` and a first
    `train_step` as `rank` on the fake process group (collectives are
    no-ops), then everything is dropped but the caches it filled."""
    import tempfile

    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    ref, world_size, seed = argument
    job: Job = load(ref)()
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        with tempfile.TemporaryDirectory(prefix="ckpt-harness-warmup-") as tmp:
            _seed_everything(seed + rank)
            ctx = RankContext(rank=rank, world_size=world_size, local_rank=rank, node=0, seed=seed,
                              ckpt_dir=Path(tmp), total_steps=1, save_every=1)
            job.setup(ctx)
            job.train_step(ctx, 1)
            job.teardown(ctx)
    finally:
        dist.destroy_process_group()
