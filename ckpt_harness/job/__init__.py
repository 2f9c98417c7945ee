"""The contract a training job implements so the harness can break and judge it.

A `Job` runs inside every rank. The harness either drives the loop itself
(`setup` → `load` → `train_step`/`save` ...) so it knows to the instruction
when each save returned, or, for frameworks that own their loop (HF Trainer,
Lightning), calls `run(ctx)` and learns about loads and saves through the
`ctx.loaded()` / `ctx.saved()` callbacks.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Mapping, Optional, Sequence

from ckpt_harness.job.axes import Axes

if TYPE_CHECKING:
    from ckpt_harness.jit import JitOp


@dataclasses.dataclass
class RankContext:
    """What one rank knows about the run it is part of.

    `seed` is the same on every rank; derive per-rank streams (data order,
    dropout) from `seed` and `rank` yourself. Before `setup` the harness seeds
    python's `random`, numpy and torch with `seed + rank`, so a job that forgets
    to seed is still deterministic and only its resume can make it diverge.
    """

    rank: int
    world_size: int
    local_rank: int
    node: int
    seed: int
    ckpt_dir: Path
    total_steps: int
    save_every: int
    keep_last: Optional[int] = None
    overwrite: bool = False
    backend: str = "gloo"
    #: What to train with beyond the model: precision, optimizer, data, compile
    #: (`ckpt_harness.job.axes`); only values the job lists in `Job.axes` reach it.
    axes: Axes = dataclasses.field(default_factory=Axes)
    #: Where the checkpoints go, as a URL fsspec (and DCP's `checkpoint_id`)
    #: takes: ``s3://ckpt/...`` on a bucket (`axes.storage`), with the server's
    #: endpoint and credentials in the environment (``AWS_ENDPOINT_URL`` ...);
    #: the path of `ckpt_dir` on local storage, where the job writes there.
    ckpt_url: str = ""
    #: Harness hooks, set by the rank runner. Jobs call `loaded`/`saved`.
    _on_loaded: Optional[Callable[[Optional[int]], None]] = dataclasses.field(
        default=None, repr=False
    )
    _on_saved: Optional[Callable[[int], None]] = dataclasses.field(default=None, repr=False)
    _on_phase: Optional[Callable[[str], None]] = dataclasses.field(default=None, repr=False)
    _on_published: Optional[Callable[[int], None]] = dataclasses.field(default=None, repr=False)

    def should_save(self, step: int) -> bool:
        """True when `step` is a save step (every `save_every` steps)."""
        return self.save_every > 0 and step % self.save_every == 0

    def loaded(self, step: Optional[int]) -> None:
        """Report that the job resumed from `step` (None: fresh start).

        Only jobs that implement `run(ctx)` call this; in the driven form the
        harness calls it with whatever `load` returned.
        """
        if self._on_loaded is not None:
            self._on_loaded(step)

    def phase(self, name: str) -> None:
        """Name what the job does from now on, for traces and fault points.

        The harness names the phases of the driven form itself ("setup",
        "load", "train_step N", "save N"). A job that owns its loop calls
        `ctx.phase(f"save {step}")` when a save starts (and e.g.
        `ctx.phase(f"train_step {step}")` after it), or `explore` finds no
        operations to break in its saves.
        """
        if self._on_phase is not None:
            self._on_phase(name)

    def saved(self, step: int) -> None:
        """Report that the save of `step` has returned on this rank.

        The harness records `state(ctx)` here, and a preemption case may end
        the run inside this call, exactly as a scheduler would.
        """
        if self._on_saved is not None:
            self._on_saved(step)

    def published(self, step: int) -> None:
        """Report that the background save of `step` has landed and is now
        the checkpoint a resume starts from (durable, `latest` moved).

        Only for jobs whose save returns before its checkpoint is complete
        (`Job.wait_for_saves`). From this call on a fault must leave save
        `step` (or a newer one) to resume; before it, the save before may be
        resumed instead. A job that never calls it is taken at its word when
        `wait_for_saves` returns: every save that returned landed then.
        Claim it only once it is true: a pointer moved before the data is
        durable is what the crash cases catch.
        """
        if self._on_published is not None:
            self._on_published(step)


class Job:
    """Subclass this to put a training job under test.

    Implement either the driven form (`setup`, `train_step`, `save`, `load`)
    or the owned-loop form (`run`), and always `state`. Every method runs in
    every rank of a real process group that the harness has initialised.

    Class attributes let the warm launcher prepare for the job once instead of
    once per rank: `preload` lists modules to import before ranks are forked
    (a framework whose import takes seconds), `env` the environment variables
    those imports need. List the job's own module last (``__name__``) when
    importing it does nothing rank-specific, as the built-in jobs do: each
    rank then finds it imported instead of importing it again. Leave it out
    when its import reads the rank's environment, starts a thread or touches
    a device: that would happen once, in the parent, for every rank.
    """

    #: Modules the job cannot run without, each with what installs it
    #: ("deepspeed": "ckpt-harness[deepspeed]"). Checked before anything
    #: starts, so a missing framework is a skip that names the fix, not a
    #: traceback from a rank.
    requires: ClassVar[Mapping[str, str]] = {}
    #: Modules the warm parent imports before forking ranks. One that is
    #: missing or raises on import (a framework release without it) is
    #: skipped with a note, and the ranks import what they need themselves:
    #: a preload never fails a run (`launch.preimport`).
    preload: ClassVar[tuple[str, ...]] = ()
    #: Environment set in the warm parent before `preload` and in every rank.
    env: ClassVar[Mapping[str, str]] = {}
    #: Run `setup` and one `train_step` once per rank, on torch's fake
    #: process group, in a template process that ranks are then forked from:
    #: first-call costs (FSDP2's first optimizer step spends ~0.25 s in DTensor
    #: sharding propagation) are paid once instead of in every run. Only for
    #: jobs whose `setup` starts no thread or process and writes nothing.
    warm_start: ClassVar[bool] = False
    #: The layout of its checkpoints ("torch_save", "dcp", "deepspeed",
    #: "hf_trainer", or a user's own): the conversions that read it
    #: (`ckpt_harness.conversions`) are run on its saves by the `convert`
    #: check. None: no conversion is claimed.
    checkpoint_layout: ClassVar[Optional[str]] = None
    #: Its rotation (`ctx.keep_last`) also keeps one best checkpoint besides
    #: the newest, as the Trainer's `load_best_model_at_end` does: retention
    #: then accepts the newest N-1 and one older checkpoint.
    keeps_best: ClassVar[bool] = False
    #: The values of each axis (`ckpt_harness.job.axes`: precision, optimizer,
    #: data, compile) the job trains with, read from `ctx.axes`; an axis not
    #: listed is at its default only. A run asking for another value is
    #: refused before it starts, naming these.
    axes: ClassVar[Mapping[str, tuple[Any, ...]]] = {}

    # -- driven form -------------------------------------------------------
    def setup(self, ctx: RankContext) -> None:
        """Build model, optimizer, scheduler and data from `ctx.seed`."""

    def train_step(self, ctx: RankContext, step: int) -> float:
        """Run optimizer step `step` (1-based) and return the loss."""
        raise NotImplementedError

    def save(self, ctx: RankContext, step: int) -> None:
        """Write the checkpoint of `step` under `ctx.ckpt_dir`, the framework's way."""
        raise NotImplementedError

    def load(self, ctx: RankContext) -> Optional[int]:
        """Resume by the framework's own discovery logic; return the step or None."""
        raise NotImplementedError

    def wait_for_saves(self, ctx: RankContext) -> None:
        """Block until every save that returned is complete on this rank, or
        raise its error. Only for jobs whose save returns before its
        checkpoint is complete (async checkpointing): the harness calls it
        where a save must have landed, at the end of a driven loop and
        before a stop after save k parks the rank (a preemption that lets
        the in-flight save finish, as a trainer's shutdown does)."""

    # -- owned-loop form ---------------------------------------------------
    def run(self, ctx: RankContext) -> None:
        """Train to `ctx.total_steps`, calling `ctx.loaded` and `ctx.saved`."""
        raise NotImplementedError

    # -- observation -------------------------------------------------------
    def state(self, ctx: RankContext) -> Mapping[str, Any]:
        """This rank's state to compare bitwise: model and optimizer tensors
        (local shards are fine), scheduler, step, RNG states, data position."""
        raise NotImplementedError

    def full_state(self, ctx: RankContext) -> Mapping[str, Any]:
        """Optional: the state that does not depend on the world size (full,
        unsharded model and optimizer tensors, schedule, step), equal on
        every rank. World-size change scenarios compare it across a save at N
        ranks and a resume at M; jobs without it are reported "n/a" there.
        Called on every rank at once, so it may use collectives (gathers)."""
        raise NotImplementedError

    def teardown(self, ctx: RankContext) -> None:
        """Release what `setup` acquired; called once per rank at the end."""

    # -- introspection used by the harness --------------------------------
    @classmethod
    def owns_loop(cls) -> bool:
        return _overrides(cls, "run")

    @classmethod
    def saves_in_background(cls) -> bool:
        return _overrides(cls, "wait_for_saves")

    @classmethod
    def reshardable(cls) -> bool:
        return _overrides(cls, "full_state")

    @classmethod
    def jit_ops(cls) -> Sequence["JitOp"]:
        """Ops the job's framework compiles on first use: the harness builds
        them once, before any deadline starts (see `ckpt_harness.jit`)."""
        return ()

    @classmethod
    def missing_frameworks(cls) -> dict[str, str]:
        """The modules of `requires` that are not installed, with their install hint."""
        import importlib.util

        return {m: hint for m, hint in cls.requires.items() if importlib.util.find_spec(m) is None}

    @classmethod
    def contract_errors(cls) -> list[str]:
        """What this class is missing to be runnable, as messages to the user."""
        errors = []
        if not _overrides(cls, "state"):
            errors.append("implement state(ctx) returning the tensors and values to compare")
        if not cls.owns_loop():
            missing = [m for m in ("train_step", "save", "load") if not _overrides(cls, m)]
            if missing:
                errors.append(
                    "implement " + ", ".join(f"{m}()" for m in missing)
                    + " (or run(ctx) for a framework that owns its training loop)"
                )
        return errors


def _overrides(cls: type, method: str) -> bool:
    return getattr(cls, method) is not getattr(Job, method)
