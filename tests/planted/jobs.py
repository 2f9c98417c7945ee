"""Planted-bug jobs the harness must flag, next to the built-ins it must pass.

Each bug is one a real team shipped: the checkpoint looks fine, the resume
runs, and the numbers quietly diverge (or the final save never returns).
They subclass the built-in `torch_save` job so that exactly one thing differs
from a checkpointer the harness passes.
"""

from __future__ import annotations

import dataclasses
import os
import random
import shutil
import time
from pathlib import Path
from typing import Optional

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from ckpt_harness import Job, RankContext
from ckpt_harness.jobs._common import (
    LATEST, atomic_write_text, build_mlp, fsync_dir, capture_rng, commit, prepare_step_dir, read_latest, step_dir,
    torch_save_durable,
)
from ckpt_harness.jobs.dcp import DcpJob
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


class NoRngStateTwin(NoRngState):
    """The same bug under another name: a baseline that expects `NoRngState`'s
    failure by its cause expects this one's too."""


class NoSchedulerState(_Forgetful):
    saves = _Forgetful.saves - {"scheduler"}


class ResumedRunDropsScheduler(_Forgetful):
    """A run that resumed writes checkpoints without one of their parts, the
    scheduler's; an uninterrupted run writes it, and the load takes what it
    finds (a compiled model's second resume: the resumed run saved its keys
    under another prefix, pytorch/torchtitan#961). Every single resume
    loads a checkpoint the uninterrupted run wrote and passes; only a
    second resume, from what the first one wrote, loses the scheduler."""

    def _load(self, ctx: RankContext) -> Optional[int]:
        found = super()._load(ctx)
        if found is not None:
            self.saves = self.saves - {"scheduler"}
        return found


class CastsInPlace(TorchSaveJob):
    """Its save exports bf16 weights by casting the live parameters in place
    and back (the in-place cast questioned in ByteDance-Seed/VeOmni PR #461):
    every checkpoint resumes bitwise, since the golden run was cast the same
    way at the same steps, and the run ends elsewhere than it would without
    the saves."""

    def save(self, ctx: RankContext, step: int) -> None:
        with torch.no_grad():
            for p in self.model.module.parameters():
                p.copy_(p.to(torch.bfloat16).to(p.dtype))
        super().save(ctx, step)


class NewestByTime(TorchSaveJob):
    """Resumes the step directory modified last, not the one `latest` names
    (a rotation or a resume that orders checkpoints by modification time,
    as transformers' does unless two are within a second: PR #37260). Where
    the checkpoints were written, time and step agree and every resume
    passes; a copy elsewhere resets the times, and it resumes another."""

    def _load(self, ctx: RankContext) -> Optional[int]:
        if read_latest(ctx.ckpt_dir) is None:
            return None
        newest = max(ctx.ckpt_dir.glob("step_*"), key=lambda p: p.stat().st_mtime)
        return self._load_from(ctx, int(newest.name.partition("_")[2]), newest)


class NoPythonRngState(TorchSaveJob):
    """Restores every RNG but Python's `random`, which it draws from each step
    for what its training does not use (a sample of the batch to log): the
    resumed state differs in RNG state only, and the weights it trains end
    as they would have (the mildest failure: `causes.Severity.RNG`)."""

    def train_step(self, ctx: RankContext, step: int) -> float:
        import random

        random.random()
        return super().train_step(ctx, step)

    def _restore_extra(self, extra, step: int) -> None:
        import random

        fresh = random.getstate()
        super()._restore_extra(extra, step)
        random.setstate(fresh)


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


class Rank1BarrierAfterSaveWhileRank0Trains(TorchSaveJob):
    """Plain DDP, as most jobs use it (no comm hook: the C++ reducer issues
    the gradient all-reduce inside `backward`). Rank 1 alone waits in a
    barrier at the end of save 2 ("let rank 0 finish uploading"), while
    rank 0 trains on and waits in step 3's gradient all-reduce: a hang no
    Python-level probe sees on rank 0, which looks like slow compute."""

    def setup(self, ctx: RankContext) -> None:
        model = DistributedDataParallel(build_mlp(ctx.seed))
        self._build_common(ctx, model, model.parameters())

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if ctx.rank == 1 and step == 2:
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


class OwnLoopIgnoresCheckpoints(OwnLoop):
    """Reports its load from a hook of the framework's load, as a Trainer
    callback does, and a fresh start when the directory is empty; but the
    checkpoint never reaches the framework (`resume_from_checkpoint`
    forgotten): a resume neither loads nor reports, and retrains from step 1
    over the old saves to the same final state."""

    def run(self, ctx: RankContext) -> None:
        inner = self.inner = TorchSaveJob()
        inner.setup(ctx)
        if read_latest(ctx.ckpt_dir) is None:
            ctx.loaded(None)
        replacing = dataclasses.replace(ctx, overwrite=True)
        for step in range(1, ctx.total_steps + 1):
            inner.train_step(ctx, step)
            if ctx.should_save(step):
                ctx.phase(f"save {step}")
                inner.save(replacing, step)
                ctx.saved(step)


class OwnLoopResumesSilently(OwnLoop):
    """Resumes correctly and names its phases, but reports only a fresh
    start: its resume is judged from the steps it trained."""

    def run(self, ctx: RankContext) -> None:
        inner = self.inner = TorchSaveJob()
        inner.setup(ctx)
        start = inner.load(ctx)
        if start is None:
            ctx.loaded(None)
        for step in range((start or 0) + 1, ctx.total_steps + 1):
            ctx.phase(f"train_step {step}")
            inner.train_step(ctx, step)
            if ctx.should_save(step):
                ctx.phase(f"save {step}")
                inner.save(ctx, step)
                ctx.saved(step)


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


class NumericRotation(TorchSaveJob):
    """accelerate's `save_state` with `total_limit` (fixed in 0.17): saves go to
    `checkpoint_<i>` (i counts saves from 0) and before each one rank 0 deletes
    the oldest folders beyond `ctx.keep_last - 1`, ordered by their number.
    Laid out flat here; `NestedNumericRotation` as accelerate lays it out."""

    #: The directory the checkpoints go in, under the checkpoint directory.
    ROOT = "."

    @staticmethod
    def oldest_first(names: list[str]) -> list[str]:
        return sorted(names, key=lambda name: int(name.rpartition("_")[2]))

    def save(self, ctx: RankContext, step: int) -> None:
        root = ctx.ckpt_dir / self.ROOT
        path = root / f"checkpoint_{step // ctx.save_every - 1}"
        if ctx.rank == 0 and ctx.keep_last is not None and root.is_dir():
            folders = self.oldest_first([p.name for p in root.iterdir() if p.name.startswith("checkpoint_")])
            for name in folders[: max(0, len(folders) + 1 - ctx.keep_last)]:
                shutil.rmtree(root / name)
        dist.barrier()
        if ctx.rank == 0:  # a directory `latest` does not name yet is a crashed save's debris
            shutil.rmtree(path, ignore_errors=True)
            path.mkdir(parents=True)
            fsync_dir(path.parent)
        dist.barrier()
        if ctx.rank == 0:
            for name, part in (("model", self.model.module), ("optimizer", self.optimizer),
                               ("scheduler", self.scheduler)):
                torch_save_durable(part.state_dict(), path / f"{name}.pt")
        torch_save_durable(self._extra(ctx, step), path / f"rng_rank{ctx.rank}.pt")
        dist.barrier()
        if ctx.rank == 0:
            atomic_write_text(ctx.ckpt_dir / LATEST, f"{step} {path.relative_to(ctx.ckpt_dir).as_posix()}\n")
        dist.barrier()

    def _load(self, ctx: RankContext) -> Optional[int]:
        pointer = ctx.ckpt_dir / LATEST
        if not pointer.exists():
            return None
        step, name = pointer.read_text().split()
        path = ctx.ckpt_dir / name
        for part, obj in (("model", self.model.module), ("optimizer", self.optimizer), ("scheduler", self.scheduler)):
            obj.load_state_dict(torch.load(path / f"{part}.pt", weights_only=True))
        self._restore_extra(torch.load(path / f"rng_rank{ctx.rank}.pt", weights_only=False), int(step))
        return int(step)


class LexicographicRotation(NumericRotation):
    """accelerate 0.16: `folders.sort()` orders "checkpoint_10" before
    "checkpoint_8", so with total_limit=3 the twelfth save deletes the newest
    before it: checkpoints 8, 9 and 11 remain instead of 9, 10 and 11."""

    @staticmethod
    def oldest_first(names: list[str]) -> list[str]:
        return sorted(names)


class NestedNumericRotation(NumericRotation):
    """accelerate's own layout (`automatic_checkpoint_naming`): every save in
    `<project_dir>/checkpoints/checkpoint_<i>`, one directory they all share."""

    ROOT = "checkpoints"


class NestedLexicographicRotation(LexicographicRotation):
    """accelerate 0.16 as its users met it: the lexicographic sort, in `checkpoints/`."""

    ROOT = "checkpoints"


class EveryRankDeletesOldCheckpoints(OwnLoop):
    """transformers 4.25.1: at the end of `train()` every process, not only the
    main one, lists the checkpoints it no longer needs and deletes them. On a
    shared filesystem a rank that listed a directory its peer then removed
    fails with FileNotFoundError, also when it checked that the directory
    exists right before deleting it. The other ranks first shut their data
    loader workers down, so in an undisturbed run rank 0 is done before they
    list anything, and the race shows only when rank 0 is late."""

    #: How long the other ranks take to shut their data loader workers down.
    WORKERS_SHUTDOWN = 0.2

    def run(self, ctx: RankContext) -> None:
        inner = self.inner = TorchSaveJob()
        inner.setup(ctx)
        start = inner.load(ctx)
        ctx.loaded(start)
        for step in range((start or 0) + 1, ctx.total_steps + 1):
            ctx.phase(f"train_step {step}")
            inner.train_step(ctx, step)
            if ctx.should_save(step):
                ctx.phase(f"save {step}")
                inner.save(ctx, step)
                ctx.saved(step)
        if ctx.rank != 0:
            time.sleep(self.WORKERS_SHUTDOWN)
        self.delete_old_checkpoints(ctx)

    def delete_old_checkpoints(self, ctx: RankContext) -> None:
        newest = read_latest(ctx.ckpt_dir)
        for path in [p for p in sorted(ctx.ckpt_dir.glob("step_*")) if newest is None or p != newest[1]]:
            if path.exists():  # checked, then acted on: a peer may delete it in between
                shutil.rmtree(path)


class MainRankDeletesOldCheckpoints(EveryRankDeletesOldCheckpoints):
    """The fix: the main process deletes, and the others wait for it."""

    def delete_old_checkpoints(self, ctx: RankContext) -> None:
        if ctx.rank == 0:
            super().delete_old_checkpoints(ctx)
        dist.barrier()


class EveryRankWritesTheModel(TorchSaveJob):
    """Every rank writes the model file, not rank 0 alone (every rank calling
    `save_pretrained()` or the tokenizer's into one directory: NVIDIA-NeMo/RL
    PR #3504, 32 ranks hung for 35 hours on NFS). The replicas are equal, so
    on a local disk the file comes out whole and every resume passes: only
    the single-writer oracle sees the two ranks on one path."""

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(ctx.ckpt_dir, step)
        self._prepare_step_dir(ctx, path)
        torch_save_durable(self.model.module.state_dict(), path / "model.pt")
        if ctx.rank == 0:
            torch_save_durable(self.optimizer.state_dict(), path / "optimizer.pt")
            torch_save_durable(self.scheduler.state_dict(), path / "scheduler.pt")
        torch_save_durable(self._extra(ctx, step), path / f"rng_rank{ctx.rank}.pt")
        commit(ctx, path, step)


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


class RetriesSaveAlone(TorchSaveJob):
    """Catches an error of its own save and waits for the disk to recover
    before going on (a "resilient" loop), while its peers wait for it in the
    save's barrier, never told. No rank exits, so no launcher ends the group:
    a hang under torchrun as under a plain launcher, unlike the built-in
    `torch_save`, whose raising rank exits and has its group ended."""

    def save(self, ctx: RankContext, step: int) -> None:
        try:
            super().save(ctx, step)
        except Exception:  # noqa: BLE001 - the bug
            while not (ctx.ckpt_dir / "disk-ok").exists():  # an operator's all-clear, never given
                time.sleep(0.05)


class KeepsOnlyTheBestAtEnd(MainRankDeletesOldCheckpoints):
    """`load_best_model_at_end` with `save_total_limit=1` (transformers' fixed
    release): at the end the main process keeps only the best checkpoint, by
    design the first, points `latest` back at it and deletes the rest, the
    newest too, on purpose. A resume of what any run leaves starts from the
    best; a delay changes nothing of that, so every delay case must pass."""

    def delete_old_checkpoints(self, ctx: RankContext) -> None:
        if ctx.rank == 0:
            best, *rest = sorted(ctx.ckpt_dir.glob("step_*"))
            atomic_write_text(ctx.ckpt_dir / LATEST, best.name + "\n")
            for path in rest:
                shutil.rmtree(path)
        dist.barrier()


class EveryRankRepublishesLatest(TorchSaveJob):
    """After its save committed, every rank writes `latest` again, through the
    same temporary name (`latest.tmp`), each a few milliseconds apart as ranks
    are: when one renames `latest.tmp` between the other's write and rename,
    the other's rename finds nothing (FileNotFoundError, in the save). Most
    single runs pass; some of a few dozen do not: a race `run --flake N`
    exposes (the multi-rank `save_pretrained` and "rank 0 and 1 rename the
    same directory" reports)."""

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if self.republishers(ctx):
            time.sleep(random.Random(os.getpid() * 1000 + step).uniform(0.0, 0.04))  # ranks arrive apart
            atomic_write_text(Path(ctx.ckpt_dir) / LATEST, step_dir(ctx.ckpt_dir, step).name + "\n")
        dist.barrier()

    def republishers(self, ctx: RankContext) -> bool:
        return True


class RankZeroRepublishesLatest(EveryRankRepublishesLatest):
    """The fixed twin: rank 0 alone writes `latest` again; nothing races."""

    def republishers(self, ctx: RankContext) -> bool:
        return ctx.rank == 0


class ReplaysThePermutation(TorchSaveJob):
    """Trains on the shuffled loader (`data="shuffled"`) and resumes it by
    skipping the batches its epoch consumed, without its sampler's
    generator state: the resumed epoch draws a permutation from a fresh
    generator, epoch 0's (the default `RandomSampler` resumed mid-epoch,
    huggingface/accelerate PR #4233). A resume inside epoch 0 passes; one
    inside a later epoch trains on other batches."""

    def _restore_extra(self, extra, step: int) -> None:
        data = dict(extra["data"])
        data["epoch_start"] = torch.Generator().manual_seed(self.stream.generator.initial_seed()).get_state()
        super()._restore_extra({**extra, "data": data}, step)


class ForgetsTheScaler(TorchSaveJob):
    """Trains fp16 with a loss scaler (`precision="fp16"`) and saves
    everything but the scaler: a resume starts at the first scale again, so
    a step the uninterrupted run skipped on overflow is taken, or the other
    way round."""

    def _extra(self, ctx: RankContext, step: int):
        extra = dict(super()._extra(ctx, step))
        extra.pop("scaler", None)
        return extra

    def _restore_scaler(self, extra) -> None:
        pass


class DcpScalerSkipsFirstSteps(DcpJob):
    """Not planted: the built-in `dcp` job at precision fp16 with a first
    loss scale of 2^20, as a model whose first steps overflow. The scaler
    skips steps 1 and 2, so at save 2 AdamW has no state yet while the
    gradients exist; DCP's `get_state_dict` then initialises no state (it
    takes gradients for a sign the state exists) and saves none, and the
    resume's `get_state_dict`, on a fresh optimizer without gradients,
    initialises it and asks the checkpoint for keys it lacks (docs/findings.md)."""

    def _build_common(self, ctx: RankContext, model, params) -> None:
        super()._build_common(ctx, model, params)
        if self.scaler is not None:
            self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 20, growth_interval=2)


class RotatesByTime(TorchSaveJob):
    """Rotates as transformers' Trainer does since PR #37260: by
    modification time, unless two checkpoints are less than a second apart,
    then by step. Its time-ordered path is wrong: it keeps the oldest N. Saves made as fast
    as this job trains only ever take the step-ordered path and pass; spaced
    a second apart (`save_spacing`), the rotation deletes the checkpoint
    `latest` names."""

    def save(self, ctx: RankContext, step: int) -> None:
        keep, ctx.keep_last = ctx.keep_last, None  # the rotation is its own, below
        try:
            super().save(ctx, step)
        finally:
            ctx.keep_last = keep
        if keep is not None and ctx.rank == 0:
            dirs = sorted(ctx.ckpt_dir.glob("step_*"))
            times = sorted(p.stat().st_mtime for p in dirs)
            if all(b - a >= 1.0 for a, b in zip(times, times[1:])):
                doomed = sorted(dirs, key=lambda p: p.stat().st_mtime)[keep:]  # meant newest first: the bug
            else:
                doomed = dirs[:-keep]
            for path in doomed:
                shutil.rmtree(path)
        dist.barrier()


class FollowsAnAbsolutePath(TorchSaveJob):
    """Its pointer names the checkpoint by absolute path, as a trainer state
    that records its `output_dir` does. Where it was written every resume
    passes; from a copy elsewhere, with the original gone, it finds nothing."""

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if ctx.rank == 0:
            atomic_write_text(ctx.ckpt_dir / "latest_path", f"{step_dir(ctx.ckpt_dir, step).resolve()}\n")
        dist.barrier()

    def _load(self, ctx: RankContext) -> Optional[int]:
        pointer = ctx.ckpt_dir / "latest_path"
        if not pointer.exists():
            return None
        path = Path(pointer.read_text().strip())
        return self._load_from(ctx, int(path.name.partition("_")[2]), path)
