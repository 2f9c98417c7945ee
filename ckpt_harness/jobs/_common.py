"""Pieces both built-in jobs share, so they differ only in how they save.

The model, data and training step are identical in both jobs on purpose: a
divergence the harness finds in one job but not the other then points at that
job's checkpointing, not at its training.
"""

from __future__ import annotations

import errno
import io
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from ckpt_harness.job import Job, RankContext
from ckpt_harness.jobs._data import IN_DIM, OUT_DIM, Data, build_data
from ckpt_harness.jobs._store import ObjectPath, Root, is_local, root

#: The axes every job built on `TinyJob` trains with (`ckpt_harness.job.axes`).
TINY_AXES = {
    "precision": ("fp32", "bf16", "fp16"),
    "optimizer": ("adamw", "sgd", "adagrad"),
    "data": ("stream", "shuffled", "workers"),
    "compile": (False, True),
}
#: torch.compile's backend for the `compile` axis (`axes.HELP` says why not inductor).
COMPILE_BACKEND = "aot_eager"

HIDDEN = 32
LATEST = "latest"
_STEP_DIR = re.compile(r"^step_(\d+)$")


# -- model, optimizer, data -----------------------------------------------------
def build_mlp(seed: int) -> nn.Sequential:
    """Weights come from `seed` alone, inside a forked RNG, so every rank
    builds the same replica without disturbing the per-rank global stream the
    harness seeded (dropout must keep drawing from that one)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return nn.Sequential(
            nn.Linear(IN_DIM, HIDDEN),
            nn.GELU(),
            nn.Dropout(p=0.1),
            nn.Linear(HIDDEN, HIDDEN),
            nn.ReLU(),
            nn.Linear(HIDDEN, OUT_DIM),
        )


def build_optimizer(params: Iterable[torch.nn.Parameter], kind: str = "adamw"):
    """An optimizer of `kind` (axis `optimizer`) plus warmup/decay, so that a
    resume which forgets the optimizer's state, the step count or the
    schedule position changes the numbers. SGD gets momentum, or it would
    have no state to forget; Adagrad starts its sums at 0.1, so the state it
    creates when built (before any step) is not all zeros.

    foreach: with FSDP2's DTensor parameters the per-tensor path makes DTensor
    propagate shardings for every op on every parameter; the list ops need it
    once per op, which halves both the first step and the steady state."""
    optimizer: torch.optim.Optimizer
    if kind == "sgd":
        optimizer = torch.optim.SGD(params, lr=1e-2, momentum=0.9, weight_decay=0.01, foreach=True)
    elif kind == "adagrad":
        optimizer = torch.optim.Adagrad(params, lr=1e-2, initial_accumulator_value=0.1, weight_decay=0.01,
                                        foreach=True)
    else:
        optimizer = torch.optim.AdamW(params, lr=1e-2, weight_decay=0.01, foreach=True)

    def warmup_then_decay(epoch: int) -> float:
        return min(1.0, (epoch + 1) / 3) * 0.9 ** max(0, epoch - 3)

    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_then_decay)
    return optimizer, scheduler


# -- RNG ------------------------------------------------------------------------
def capture_rng() -> dict[str, Any]:
    return {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),
    }


def saved_rng() -> dict[str, Any]:
    """`capture_rng()` in types `torch.load(weights_only=True)` accepts:
    numpy's key array as a tensor. An ndarray would need
    `weights_only=False`, and then loading the checkpoint runs whatever code
    a tampered file carries (the safe-loading property)."""
    rng = capture_rng()
    name, keys, *rest = rng["numpy"]
    return {**rng, "numpy": (name, torch.from_numpy(keys.astype(np.int64)), *rest)}


def restore_rng(state: Mapping[str, Any]) -> None:
    """From `saved_rng()` or `capture_rng()`."""
    random.setstate(state["python"])
    name, keys, *rest = state["numpy"]
    if isinstance(keys, torch.Tensor):
        keys = keys.numpy().astype(np.uint32)
    np.random.set_state((name, keys, *rest))
    torch.set_rng_state(state["torch"])


# -- small durable files --------------------------------------------------------
# On a bucket (`_store.ObjectPath`) an object is durable, and whole, once its
# upload returned, and there is no directory to sync: the helpers below do
# there what that leaves to do.
def fsync_dir(path: Root) -> None:
    """A rename or a new file is only durable once its directory is fsynced."""
    if not is_local(path):
        return
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_text(path: Root, text: str) -> None:
    """Readers see the old content or the new, never a torn pointer (on a
    bucket one upload: an object appears whole or not at all)."""
    if not is_local(path):
        path.write_text(text)
        return
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_files(path: Root) -> None:
    """Make every file directly in `path` durable, whoever wrote it and
    however: its data is on disk only if an fsync ran after its last byte
    reached the kernel, and a writer may fsync before it flushes (DCP's
    `.metadata` in torch 2.13, docs/findings.md). An fsync through any
    descriptor reaches the file, so one rank can vouch for its peers' files."""
    if not is_local(path):
        return
    for file in sorted(p for p in path.iterdir() if p.is_file()):
        with open(file, "rb") as f:
            os.fsync(f.fileno())


def torch_save_durable(obj: Any, path: Root) -> None:
    """Through a Python file object (so the harness's write probes see every
    byte) and fsynced, because the `latest` pointer will vouch for it."""
    if not is_local(path):
        with path.open("wb") as f:
            torch.save(obj, f)
        return
    with open(path, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())


def readable(path: Root) -> Any:
    """What `torch.load` takes for `path`: the path itself if local (torch reads it natively), the object's
    bytes from a bucket."""
    return path if is_local(path) else io.BytesIO(path.read_bytes())


# -- step directories and the `latest` pointer ----------------------------------
def step_dir(ckpt_dir: Root, step: int) -> Root:
    return _root(ckpt_dir) / f"step_{step:06d}"


def _root(ckpt_dir: Any) -> Root:
    return ckpt_dir if isinstance(ckpt_dir, ObjectPath) else Path(ckpt_dir)


def _rmtree(path: Root) -> None:
    if is_local(path):
        shutil.rmtree(path)
    else:
        path.rmtree()


def prepare_step_dir(ctx: RankContext, path: Root) -> None:
    """Every rank decides on the same view of the directory (checked before
    the first barrier, created after it), so an overwrite refusal is raised
    on all ranks alike instead of leaving some of them waiting in a
    collective.

    A directory that `latest` never vouched for is debris of a save that
    crashed before its commit, not a checkpoint: it is replaced whatever
    `overwrite` says, or the job could never get past the step it crashed in.
    """
    if path.exists() and not ctx.overwrite and _committed(root(ctx), path):
        raise FileExistsError(
            errno.EEXIST, "checkpoint directory already exists and overwrite=False", str(path)
        )
    dist.barrier()
    if ctx.rank == 0:
        if path.exists():
            _rmtree(path)
        path.mkdir(parents=True)
        fsync_dir(path.parent)
    dist.barrier()


def _committed(ckpt_dir: Root, path: Root) -> bool:
    try:
        found = read_latest(ckpt_dir)
    except (OSError, ValueError):
        return True  # an unreadable pointer proves nothing: do not destroy
    match = _STEP_DIR.match(path.name)
    return found is not None and match is not None and int(match.group(1)) <= found[0]


def commit(ctx: RankContext, path: Root, step: int, *, sync_files: bool = False) -> None:
    """Publish `path` once every rank's files are in it, then rotate.

    `sync_files` fsyncs the files first, for writers whose own fsyncs cannot
    be trusted. The trailing barrier makes a returned save mean a committed
    one on every rank, which is the promise the oracle's S_k relies on.
    """
    dist.barrier()
    if ctx.rank == 0:
        if sync_files:
            fsync_files(path)
        fsync_dir(path)
        atomic_write_text(root(ctx) / LATEST, path.name + "\n")
        if ctx.keep_last is not None:
            _rotate(root(ctx), step, ctx.keep_last)
    dist.barrier()


def _rotate(ckpt_dir: Root, current: int, keep_last: int) -> None:
    """Only steps at or below the one just published count, so a stale dir
    left by a failed later save can never push the live checkpoint out."""
    steps = sorted(
        int(m.group(1))
        for p in ckpt_dir.iterdir()
        if p.is_dir() and (m := _STEP_DIR.match(p.name)) and int(m.group(1)) <= current
    )
    keep = set(steps[-max(1, keep_last):]) | {current}
    for s in steps:
        if s not in keep:
            _rmtree(step_dir(ckpt_dir, s))


def read_latest(ckpt_dir: Root) -> Optional[tuple[int, Root]]:
    """No pointer means a fresh start; a pointer to nothing is an error, so
    that a lost checkpoint is refused rather than silently retrained."""
    pointer = _root(ckpt_dir) / LATEST
    if not pointer.exists():
        return None
    name = pointer.read_text().strip()
    m = _STEP_DIR.match(name)
    if m is None:
        raise ValueError(f"{pointer}: not a checkpoint name: {name!r}")
    path = _root(ckpt_dir) / name
    if not path.is_dir():
        raise FileNotFoundError(errno.ENOENT, "`latest` points to a missing checkpoint", str(path))
    return int(m.group(1)), path


def check_extra(extra: Mapping[str, Any], ctx: RankContext, step: int, where: Path) -> None:
    """Catch per-rank files from another save or another world size, which
    would otherwise resume a mixed state without complaint."""
    got = (extra.get("step"), extra.get("rank"), extra.get("world_size"))
    if got != (step, ctx.rank, ctx.world_size):
        raise RuntimeError(
            f"{where}: per-rank state is for (step, rank, world_size)={got}, "
            f"expected {(step, ctx.rank, ctx.world_size)}"
        )


def unanimous(ctx: RankContext, fn: Callable[[], Any]) -> Any:
    """Run this rank's (collective-free) part of a resume, then make the
    outcome the same everywhere.

    A rank that cannot read its files would otherwise leave its peers to fail
    later with an unrelated collective error, or to train on; here every rank
    raises, and the message names the rank and the file. Ranks that each
    succeeded but got different answers (e.g. found different checkpoints)
    are refused as well.
    """
    try:
        result, error = fn(), None
    except (KeyboardInterrupt, SystemExit):
        raise
    except BaseException as e:  # DCP's CheckpointException is a BaseException
        result, error = None, e
    outcomes: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(
        outcomes, (result, None if error is None else f"{type(error).__name__}: {error}")
    )
    if error is not None:
        raise error
    failed = [f"rank {r}: {m}" for r, (_, m) in enumerate(outcomes) if m is not None]
    if failed:
        raise RuntimeError("checkpoint load failed on other ranks; " + "; ".join(failed))
    results = [r for r, _ in outcomes]
    if any(r != result for r in results):
        raise RuntimeError(f"ranks disagree while loading the checkpoint: {results}")
    return result


# -- the shared training loop and observation -----------------------------------
#: Keys of `state` that belong to one rank and have no counterpart at another
#: world size: RNG streams and the data shard's position.
PER_RANK = ("rng/", "data/")


def world_independent(state: Mapping[str, Any]) -> dict[str, Any]:
    """`state` without its per-rank keys: what `full_state` may compare."""
    return {k: v for k, v in state.items() if not k.startswith(PER_RANK)}


def _local(t: torch.Tensor) -> torch.Tensor:
    if hasattr(t, "to_local"):
        t = t.to_local()
    return t.detach().cpu().clone()


def _full(t: torch.Tensor) -> torch.Tensor:
    if hasattr(t, "full_tensor"):
        t = t.full_tensor()
    return t.detach().cpu().clone()


class TinyJob(Job):
    """Training and `state` shared by the built-in jobs; subclasses provide
    `setup` (wrapping), `save` and `load`, and name their parameters.

    The axes (`TINY_AXES`) live here, so every job built on it trains the
    same way along them and differs only in how it saves: the loss scaler
    of fp16 and the data source's state travel in the per-rank extras
    (`_extra`), which every such job saves and restores."""

    model: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any
    stream: Data
    scaler: Optional[Any] = None
    step: int = 0
    axes = TINY_AXES
    _precision: Optional[torch.dtype] = None

    def _named_params(self) -> Iterable[tuple[str, torch.nn.Parameter]]:
        raise NotImplementedError

    def _compiled(self, ctx: RankContext, model: nn.Module) -> nn.Module:
        """`model`, through torch.compile when the axis says so (as most scripts do it:
        the wrapper's state-dict keys gain `_orig_mod.`)."""
        return torch.compile(model, backend=COMPILE_BACKEND) if ctx.axes.compile else model

    def _build_common(self, ctx: RankContext, model: nn.Module, params) -> None:
        self.model = model
        self.optimizer, self.scheduler = build_optimizer(params, ctx.axes.optimizer)
        self.stream = build_data(ctx.axes.data, ctx.seed, ctx.rank, ctx.world_size)
        self._precision = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(ctx.axes.precision)
        # torch's first scale and a short growth interval: the scale grows every
        # other step until it overflows (step 7 of the default run) and backs off,
        # so it is state a resume must carry.
        # torch.amp's scaler serves FSDP2 too: DTensor reduces its found-inf check over the mesh.
        self.scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16, growth_interval=2) \
            if ctx.axes.precision == "fp16" else None
        self.step = 0

    def _extra(self, ctx: RankContext, step: int) -> dict[str, Any]:
        return {
            "step": step,
            "rank": ctx.rank,
            "world_size": ctx.world_size,
            "rng": saved_rng(),
            "data": self.stream.state_dict(),
            **({"scaler": self.scaler.state_dict()} if self.scaler is not None else {}),
        }

    def _restore_extra(self, extra: Mapping[str, Any], step: int) -> None:
        self.stream.load_state_dict(extra["data"])
        self._restore_scaler(extra)
        self.step = step
        restore_rng(extra["rng"])

    def _restore_scaler(self, extra: Mapping[str, Any]) -> None:
        if self.scaler is not None:
            self.scaler.load_state_dict(extra["scaler"])

    def train_step(self, ctx: RankContext, step: int) -> float:
        x, y = self.stream.next_batch()
        with torch.autocast("cpu", dtype=self._precision or torch.float32, enabled=self._precision is not None):
            out = self.model(x)
        loss = nn.functional.mse_loss(out.float(), y)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.scheduler.step()
        self.step = step
        return loss.item()

    def state(self, ctx: RankContext) -> Mapping[str, Any]:
        return {**self._tensor_state(_local), **self._progress_state(self.optimizer)}

    def _tensor_state(self, convert: Callable[[torch.Tensor], torch.Tensor]) -> dict[str, Any]:
        """Model and optimizer tensors by parameter name, each through `convert`
        (this rank's shard for `state`, the whole tensor for `full_state`)."""
        out: dict[str, Any] = {}
        named = list(self._named_params())
        for name, p in named:
            out[f"model/{name}"] = convert(p)
        for name, p in named:
            for key, value in sorted(self.optimizer.state.get(p, {}).items()):
                out[f"optim/{name}/{key}"] = convert(value) if torch.is_tensor(value) else value
        return out

    def _progress_state(self, optimizer: Any) -> dict[str, Any]:
        """Everything but the tensors: hyperparameters, schedule, step, RNG
        states and data position (shared with jobs that shard differently)."""
        out: dict[str, Any] = {}
        for i, group in enumerate(optimizer.param_groups):
            for key, value in group.items():
                if key != "params":
                    out[f"optim/param_groups/{i}/{key}"] = value
        for key, value in self.scheduler.state_dict().items():
            out[f"scheduler/{key}"] = list(value) if isinstance(value, list) else value
        out["step"] = self.step
        rng = capture_rng()
        out["rng/python"] = rng["python"]
        out["rng/numpy"] = rng["numpy"]
        out["rng/torch"] = rng["torch"].clone()
        out["data/position"] = self.stream.position
        if self.scaler is not None:
            out.update({f"scaler/{k}": v for k, v in self.scaler.state_dict().items()})
        return out

    def _full_state(self) -> dict[str, Any]:
        """`Job.full_state` for jobs that keep whole parameters in
        `_named_params` (plain or DTensor): the world-size independent part of
        `state`. Gathering a DTensor is a collective, and every rank calls
        this in the same order."""
        return world_independent({**self._tensor_state(_full), **self._progress_state(self.optimizer)})

    def _restore_resharded(self, extra: Mapping[str, Any], step: int) -> None:
        """Resume saved at another world size: the schedule and step carry
        over, but RNG streams and data shards are per rank and have no
        counterpart, so they keep their fresh seeding; the stream is moved
        to the step's position so no sample is revisited twice per rank."""
        if extra.get("step") != step:
            raise RuntimeError(f"per-rank state is for step {extra.get('step')}, expected {step}")
        self.step = step
        self._restore_scaler(extra)
        self.stream.skip_to(step)

    def teardown(self, ctx: RankContext) -> None:
        if "stream" in self.__dict__:
            self.stream.close()
        for attr in ("model", "optimizer", "scheduler", "stream", "scaler"):
            self.__dict__.pop(attr, None)
