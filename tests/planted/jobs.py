"""Planted-bug jobs the harness must flag, next to the built-ins it must pass.

Each bug is one a real team shipped: the checkpoint looks fine, the resume
runs, and the numbers quietly diverge (or the final save never returns).
They subclass the built-in `torch_save` job so that exactly one thing differs
from a checkpointer the harness passes.
"""

from __future__ import annotations

from typing import Optional

import torch
import torch.distributed as dist

from ckpt_harness import Job, RankContext
from ckpt_harness.jobs._common import capture_rng, commit, prepare_step_dir, read_latest, step_dir, torch_save_durable
from ckpt_harness.jobs.torch_save import TorchSaveJob


class _Forgetful(TorchSaveJob):
    """Saves only the parts in `saves`; its load restores whatever it finds,
    the `if os.path.exists(...)` style that turns a missing file into a
    silent partial resume."""

    saves = frozenset({"model", "optimizer", "scheduler", "rng"})

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(ctx.ckpt_dir, step)
        prepare_step_dir(ctx, path)
        if ctx.rank == 0:
            parts = {"model": self.model.module, "optimizer": self.optimizer, "scheduler": self.scheduler}
            for name, obj in parts.items():
                if name in self.saves:
                    torch_save_durable(obj.state_dict(), path / f"{name}.pt")
        extra = self._extra(ctx, step)
        if "rng" not in self.saves:
            del extra["rng"]
        torch_save_durable(extra, path / f"rng_rank{ctx.rank}.pt")
        commit(ctx, path, step)

    def _load(self, ctx: RankContext) -> Optional[int]:
        found = read_latest(ctx.ckpt_dir)
        if found is None:
            return None
        step, path = found
        parts = {"model": self.model.module, "optimizer": self.optimizer, "scheduler": self.scheduler}
        for name, obj in parts.items():
            if (path / f"{name}.pt").exists():
                obj.load_state_dict(torch.load(path / f"{name}.pt", weights_only=True))
        extra = torch.load(path / f"rng_rank{ctx.rank}.pt", weights_only=False)
        extra.setdefault("rng", capture_rng())  # "no RNG saved: keep going with ours"
        self._restore_extra(extra, step)
        return step


class NoOptimizerState(_Forgetful):
    saves = _Forgetful.saves - {"optimizer"}


class NoRngState(_Forgetful):
    saves = _Forgetful.saves - {"rng"}


class NoSchedulerState(_Forgetful):
    saves = _Forgetful.saves - {"scheduler"}


class WrongStep(TorchSaveJob):
    """Reports the step before the one it restored (an off-by-one in a
    `global_step` counter): the harness then repeats a step."""

    def load(self, ctx: RankContext) -> Optional[int]:
        step = super().load(ctx)
        return None if step is None else step - 1


class Rank0BarrierInFinalSave(TorchSaveJob):
    """Only rank 0 enters a barrier while writing the final checkpoint: the
    job trains to the end and then never finishes."""

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if ctx.rank == 0 and step == ctx.total_steps:
            dist.barrier()


class SetupFailsOnRank1(TorchSaveJob):
    def setup(self, ctx: RankContext) -> None:
        if ctx.rank == 1:
            raise RuntimeError("dataset shard 1 is missing")
        super().setup(ctx)


class Unseeded(TorchSaveJob):
    """Draws from an RNG the harness does not seed: two identical runs differ."""

    def setup(self, ctx: RankContext) -> None:
        super().setup(ctx)
        import os

        with torch.no_grad():
            noise = int.from_bytes(os.urandom(4), "little") / 2**32
            next(self.model.module.parameters()).add_(noise)


class NotAJob:
    def state(self, ctx):  # pragma: no cover - never runs
        return {}


class MissingMethods(Job):
    def state(self, ctx: RankContext):  # pragma: no cover - never runs
        return {}


class OwnLoop(Job):
    """A framework that owns its training loop (HF Trainer, Lightning style):
    the harness only calls `run` and learns of loads and saves through ctx."""

    def run(self, ctx: RankContext) -> None:
        inner = self.inner = TorchSaveJob()
        inner.setup(ctx)
        start = inner.load(ctx)
        ctx.loaded(start)
        for step in range((start or 0) + 1, ctx.total_steps + 1):
            inner.train_step(ctx, step)
            if ctx.should_save(step):
                inner.save(ctx, step)
                ctx.saved(step)

    def state(self, ctx: RankContext):
        return self.inner.state(ctx)


class OwnLoopForgetsToReport(OwnLoop):
    """Saves, but never tells the harness it resumed."""

    def run(self, ctx: RankContext) -> None:
        ctx.loaded = lambda step: None
        super().run(ctx)


class ExpectsRotationAndOverwrite(TorchSaveJob):
    """Refuses to start unless the harness passed keep_last=1 and overwrite=True:
    a setting dropped on its way to the ranks fails the golden run."""

    def setup(self, ctx: RankContext) -> None:
        if ctx.keep_last != 1 or not ctx.overwrite:
            raise RuntimeError(f"expected keep_last=1 and overwrite=True, got keep_last={ctx.keep_last}, "
                               f"overwrite={ctx.overwrite}")
        super().setup(ctx)


# -- jobs that cannot run: an ERROR or a skip, never a FAIL ------------------------
class TrainStepFailsOnRank1(TorchSaveJob):
    """A bug in the training code, not in checkpointing: no verdict on checkpoints."""

    def train_step(self, ctx: RankContext, step: int) -> float:
        if ctx.rank == 1 and step == 2:
            raise ValueError("NaN loss at step 2")
        return super().train_step(ctx, step)


class NeedsAbsentFramework(TorchSaveJob):
    """Declares a framework that is not installed (as deepspeed is without its extra)."""

    requires = {"ckpt_harness_absent_framework": "ckpt-harness[absent]"}


class SlowJitOp(TorchSaveJob):
    """A framework op compiled on first use, slower than the job's deadline
    (`CKPT_TEST_JIT_DIR`, `CKPT_TEST_BUILD_SECONDS`): built before it starts."""

    @classmethod
    def jit_ops(cls):
        import os
        from pathlib import Path

        from ckpt_harness.jit import JitOp

        seconds = os.environ["CKPT_TEST_BUILD_SECONDS"]
        return (JitOp("the planted slow op", Path(os.environ["CKPT_TEST_JIT_DIR"]) / "slow_op",
                      "tests.planted.jit:build", f"slow {seconds}",
                      env={"CKPT_TEST_BUILD_SECONDS": seconds}),)


class PlainDDP(TorchSaveJob):
    """The README's job as most users write it: DDP with no comm hook.

    Not a checkpoint bug: from 3 ranks up the reducer's one-time bucket
    rebuild makes the first step after any resume sum gradients in another
    order, so the final state drifts in the last bits although the state
    after load is bitwise right. Must come out UNKNOWN with that explained,
    never a bare FAIL.
    """

    ddp_options: dict = {}

    def setup(self, ctx: RankContext) -> None:
        from torch.nn.parallel import DistributedDataParallel

        from ckpt_harness.jobs._common import build_mlp

        model = DistributedDataParallel(build_mlp(ctx.seed), **self.ddp_options)
        self._build_common(ctx, model, model.parameters())


class PlainDDPNoRebuild(PlainDDP):
    """The fix the note gives: without a bucket rebuild the resume is bitwise."""

    ddp_options = {"find_unused_parameters": True}
