"""A whole job, from scratch: the `ckpt_harness.Job` contract with nothing but torch.

Run it from this directory (or with it on PYTHONPATH):

    ckpt-harness run --job minimal_job:MinimalJob
    ckpt-harness explore --job minimal_job:MinimalJob

The contract, as the harness drives it on every rank of a real process group:

1. The process group is up before anything is called (gloo on CPU), and
   python's `random`, numpy and torch are seeded with `ctx.seed + ctx.rank`.
2. `setup(ctx)` builds model, optimizer, scheduler and data from `ctx.seed`.
3. `load(ctx)` runs once, on every rank, after `setup`: resume by your own
   discovery (here the newest committed step directory) and return the step you resumed at,
   or None for a fresh start. Raise if what you found is damaged: a refusal
   is a correct answer to a corrupt checkpoint, silently loading it is not.
4. Steps are numbered from 1. After a resume at step k the next call is
   `train_step(ctx, k + 1)`, up to `ctx.total_steps`.
5. Right after `train_step(ctx, step)`, when `ctx.should_save(step)` (every
   `ctx.save_every` steps), the harness calls `save(ctx, step)`. When it
   returns on a rank, that rank's `state(ctx)` is recorded as the state the
   checkpoint of `step` must give back.
6. `state(ctx)` is this rank's state to compare bitwise: a mapping of names
   to tensors, numpy arrays, numbers, strings, bytes, None, or dicts and
   lists of them (call `.state_dict()` on modules, optimizers and
   schedulers). Put in it everything a resume must restore: model,
   optimizer, scheduler, step, RNG states, data position. What you leave out
   is not checked.

The save below is a shape that passes every crash, power-loss and
corruption case `explore` makes: each rank writes its file into a staging
directory and fsyncs it; rank 0 writes a manifest of their sha256, fsyncs
the directory and renames it into place (the commit), then fsyncs its
parent. The load takes the newest committed directory, checks every file
against the manifest, and refuses, naming the file, when one differs.

Its first draft moved a `latest` pointer after the rename and checked
sizes only; `explore` found three mistakes in it, each one finding: a
crash between the rename and the pointer left a `step_N` that the re-run
save could not rename onto (ENOTEMPTY); a bit flip loaded silently; a
deleted pointer started training over.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import random
import shutil
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn

from ckpt_harness import Job

MANIFEST = "manifest.json"


class MinimalJob(Job):
    def setup(self, ctx):
        torch.manual_seed(ctx.seed)  # the same initial weights on every rank
        self.model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-2)
        self.scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=3, gamma=0.5)
        # this rank's data stream: its own generator, whose state is the data position
        self.data = torch.Generator().manual_seed(ctx.seed * 1000 + ctx.rank)
        self.step = 0

    def train_step(self, ctx, step):
        x = torch.randn(4, 8, generator=self.data)
        y = x.sum(dim=1, keepdim=True) + 0.01 * torch.randn(4, 1)  # torch's global RNG: part of the state
        loss = nn.functional.mse_loss(self.model(x), y)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        for p in self.model.parameters():  # data parallel by hand: average the gradients
            dist.all_reduce(p.grad)
            p.grad /= ctx.world_size
        self.optimizer.step()
        self.scheduler.step()
        self.step = step
        return loss.item()

    # -- checkpointing ------------------------------------------------------------------
    def _payload(self, ctx):
        """What this rank saves: the replicas on rank 0, every rank its RNG and data position."""
        own = {"rng": _rng(), "data": self.data.get_state(), "step": self.step}
        if ctx.rank == 0:
            own |= {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                    "scheduler": self.scheduler.state_dict()}
        return own

    def save(self, ctx, step):
        root = Path(ctx.ckpt_dir)
        final, staging = root / f"step_{step:06d}", root / f"step_{step:06d}.tmp"
        if ctx.rank == 0:
            shutil.rmtree(staging, ignore_errors=True)  # a crashed save's leftovers
            staging.mkdir(parents=True)
            _fsync_dir(root)
        dist.barrier()
        buffer = io.BytesIO()
        torch.save(self._payload(ctx), buffer)
        _write_durably(staging / f"rank{ctx.rank}.pt", buffer.getvalue())
        digests = [None] * ctx.world_size
        dist.all_gather_object(digests, hashlib.sha256(buffer.getvalue()).hexdigest())
        if ctx.rank == 0:
            _write_durably(staging / MANIFEST, json.dumps({"step": step, "sha256": digests}).encode())
            _fsync_dir(staging)
            if final.exists():  # saved before, by a run this one resumed behind: this save replaces it
                shutil.rmtree(final)
            os.rename(staging, final)  # the commit: the directory appears whole or not at all
            _fsync_dir(root)
        dist.barrier()  # a save that returned is committed on every rank

    def load(self, ctx):
        """The newest committed `step_N`, every rank's file checked against the
        manifest on every rank, so that all ranks agree, or refuse alike."""
        root = Path(ctx.ckpt_dir)
        committed = sorted(p for p in root.glob("step_*") if p.name.removeprefix("step_").isdigit())
        if not committed:
            return None
        path = committed[-1]
        try:
            manifest = json.loads((path / MANIFEST).read_text())
            digests = manifest["sha256"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise RuntimeError(f"{path / MANIFEST}: unreadable ({e})") from None
        if len(digests) != ctx.world_size:
            raise RuntimeError(f"{path} was saved by {len(digests)} ranks, this run has {ctx.world_size}")
        files = {}
        for rank, digest in enumerate(digests):
            file = path / f"rank{rank}.pt"
            data = file.read_bytes() if file.exists() else None
            if data is None or hashlib.sha256(data).hexdigest() != digest:
                raise RuntimeError(f"{file}: {'missing' if data is None else 'does not match the manifest'}")
            files[rank] = data
        own = torch.load(io.BytesIO(files[ctx.rank]), weights_only=False)  # numpy's RNG state is an ndarray
        shared = torch.load(io.BytesIO(files[0]), weights_only=False)  # rank 0's file holds the replicas
        self.model.load_state_dict(shared["model"])
        self.optimizer.load_state_dict(shared["optimizer"])
        self.scheduler.load_state_dict(shared["scheduler"])
        self.data.set_state(own["data"])
        _set_rng(own["rng"])
        self.step = own["step"]
        return self.step

    # -- what the harness compares -------------------------------------------------------
    def state(self, ctx):
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "step": self.step,
                "data": self.data.get_state(), "rng": _rng()}


def _rng():
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def _set_rng(saved):
    random.setstate(saved["python"])
    np.random.set_state(saved["numpy"])
    torch.set_rng_state(saved["torch"])


def _write_durably(path, data):
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
