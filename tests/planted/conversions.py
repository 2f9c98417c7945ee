"""Conversions of the `torch_save` layout, one faithful and four that each lose
something a real converter has lost: the `convert` check must pass the first
and flag the others naming the key. Run on `TiedTorchSave`, whose model holds
a tied weight (`head.weight` is `net.3.weight`), as a language model's output
projection is its embedding.

Each writes a step directory of the same layout (`out/step_XXXXXX`), read back
as `TorchSaveJob.load` would (`conversions._layouts.torch_save_job`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from ckpt_harness.conversions import _layouts
from ckpt_harness.jobs._common import build_mlp, step_dir
from ckpt_harness.jobs.torch_save import TorchSaveJob, _rank_ordered_mean


class Resave:
    """Every file loaded and saved again, untouched: the faithful one."""

    reads = "torch_save"
    writes = "the same step directory, each file saved again"
    drops: tuple[str, ...] = ()
    why_dropped = ""
    requires: Mapping[str, str] = {}

    def applies(self, ckpt_dir: Path, step: int) -> Optional[str]:
        return None

    def convert(self, ckpt_dir: Path, step: int, out: Path) -> None:
        source, target = step_dir(ckpt_dir, step), step_dir(out, step)
        target.mkdir()
        for path in sorted(source.glob("*.pt")):
            torch.save(self.change(path.name, torch.load(path, weights_only=True), ckpt_dir, step), target / path.name)

    def change(self, name: str, content: Any, ckpt_dir: Path, step: int) -> Any:
        return content

    def read(self, out: Path) -> Mapping[str, Any]:
        (path,) = out.glob("step_*")
        return _layouts.torch_save_job(path)


class DropsTiedWeight(Resave):
    """Drops the first of two keys that share a tensor, taking it for a
    duplicate: the weight survives only under the name the model does not
    train it by."""

    def change(self, name, content, ckpt_dir, step):
        if name == "model.pt":
            content.pop("net.3.weight")
        return content


class CastsToBfloat16(Resave):
    """Halves the model for shipping, an undocumented cast."""

    def change(self, name, content, ckpt_dir, step):
        if name == "model.pt":
            cast: dict[int, torch.Tensor] = {}  # a tied weight stays one tensor
            content = {k: cast.setdefault(v.untyped_storage().data_ptr(), v.to(torch.bfloat16))
                       for k, v in content.items()}
        return content


class LosesOptimizerStep(Resave):
    """Keeps Adam's moments but not its step count (bias correction restarts)."""

    def change(self, name, content, ckpt_dir, step):
        if name == "optimizer.pt":
            for entries in content["state"].values():
                entries.pop("step")
        return content


class MixesTwoSaves(Resave):
    """Takes the optimizer from the save before: every file is a real one."""

    def change(self, name, content, ckpt_dir, step):
        if name == "optimizer.pt":
            earlier = max(s for s in (int(p.name.split("_")[1]) for p in Path(ckpt_dir).glob("step_*")) if s < step)
            content = torch.load(step_dir(ckpt_dir, earlier) / name, weights_only=True)
        return content


FAITHFUL = Resave()
DROPS_TIED_WEIGHT = DropsTiedWeight()
CASTS_TO_BFLOAT16 = CastsToBfloat16()
LOSES_OPTIMIZER_STEP = LosesOptimizerStep()
MIXES_TWO_SAVES = MixesTwoSaves()


class _Tied(nn.Module):
    def __init__(self, seed: int) -> None:
        super().__init__()
        self.net = build_mlp(seed)
        self.head = nn.Module()  # no new tensor, no draw from the ranks' streams
        self.head.weight = self.net[3].weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


class TiedTorchSave(TorchSaveJob):
    """The torch_save job with a tied weight: its state dict names one
    tensor twice (`net.3.weight`, `head.weight`), its parameters once."""

    preload = ()

    def setup(self, ctx):
        model = DistributedDataParallel(_Tied(ctx.seed))
        model.register_comm_hook(None, _rank_ordered_mean)
        self._build_common(ctx, model, model.parameters())
