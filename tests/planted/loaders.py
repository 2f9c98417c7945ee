"""Planted loaders for the safe-loading property: two that run code a
tampered checkpoint file carries, and the correct one they each differ from
in one thing.

All three write the built-in `torch_save` layout plus a rank-0 side file of
run metadata (the kind of thing scripts keep next to their weights:
`trainer_state`, a config, a sampler position); they differ only in how
they read.
"""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any, Optional

import torch

from ckpt_harness import RankContext
from ckpt_harness.jobs._common import read_latest
from ckpt_harness.jobs.torch_save import TorchSaveJob


class SafeLoad(TorchSaveJob):
    """Correct: every torch file read with `weights_only=True`, the side file
    is JSON. A tampered file is refused, never run."""

    side_file = "run_meta.json"

    def _prepare_step_dir(self, ctx: RankContext, path: Path) -> None:
        # The built-in save, with the side file written first (before the commit).
        super()._prepare_step_dir(ctx, path)
        if ctx.rank == 0:
            step = int(path.name.rsplit("_", 1)[1])
            with open(path / self.side_file, "wb") as f:
                f.write(self._dump_meta({"step": step, "world_size": ctx.world_size}))
                f.flush()
                os.fsync(f.fileno())

    def _load(self, ctx: RankContext) -> Optional[int]:
        found = read_latest(ctx.ckpt_dir)
        if found is None:
            return None
        step, path = found
        with open(path / self.side_file, "rb") as f:
            meta = self._load_meta(f)
        if meta["step"] != step:
            raise RuntimeError(f"{path / self.side_file} is for step {meta['step']}, expected {step}")
        return super()._load(ctx)

    def _dump_meta(self, meta: dict[str, Any]) -> bytes:
        return json.dumps(meta).encode()

    def _load_meta(self, f) -> dict[str, Any]:
        return json.load(f)


class UnsafeTorchLoad(SafeLoad):
    """Reads the checkpoint with `torch.load(weights_only=False)`: what code
    written before torch 2.6 made `weights_only=True` the default still
    passes, to load optimizer state or numpy arrays without allowlisting."""

    def _read(self, path: Path):
        return torch.load(path, map_location="cpu", weights_only=False)


class UnpicklesSideFile(SafeLoad):
    """Keeps its metadata side file as a pickle and reads it with
    `pickle.load`: the torch files are loaded safely, the side file is not."""

    side_file = "run_meta.pkl"

    def _dump_meta(self, meta: dict[str, Any]) -> bytes:
        return pickle.dumps(meta)

    def _load_meta(self, f) -> dict[str, Any]:
        return pickle.load(f)

