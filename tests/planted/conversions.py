"""Conversions of the `torch_save` layout, one faithful and four that each lose
something a real converter has lost: the `convert` check must pass the first
and flag the others naming the key. Run on `TiedTorchSave`, whose model holds
a tied weight (`head.weight` is `net.3.weight`), as a language model's output
projection is its embedding.

Each writes the files of a step directory of the same layout, read back as
`TorchSaveJob.load` would (`conversions._layouts.torch_save_job`), and, put
where the save was, resumed by that loader. Below them, two loaders of the
`dcp` job for `format-confusion`: one that guesses the layout from a file's
presence, one that checks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

from ckpt_harness import RankContext
from ckpt_harness.conversions import _layouts
from ckpt_harness.jobs._common import build_mlp, read_latest, step_dir, unanimous
from ckpt_harness.jobs.dcp import DcpJob
from ckpt_harness.jobs.torch_save import TorchSaveJob, _rank_ordered_mean


class Resave:
    """Every file loaded and saved again, untouched: the faithful one."""

    reads = "torch_save"
    gives = "torch_save"
    writes = "the same step directory, each file saved again"
    drops: tuple[str, ...] = ()
    why_dropped = ""
    requires: Mapping[str, str] = {}

    def applies(self, source: Path) -> Optional[str]:
        return None

    def convert(self, source: Path, out: Path) -> None:
        for path in sorted(source.glob("*.pt")):
            torch.save(self.change(path.name, torch.load(path, weights_only=True), source), out / path.name)

    def change(self, name: str, content: Any, source: Path) -> Any:
        return content

    def read(self, out: Path) -> Mapping[str, Any]:
        return _layouts.torch_save_job(out)

    def read_source(self, source: Path) -> Mapping[str, Any]:
        return _layouts.torch_save_job(source)


class DropsTiedWeight(Resave):
    """Drops the first of two keys that share a tensor, taking it for a
    duplicate: the weight survives only under the name the model does not
    train it by."""

    def change(self, name, content, source):
        if name == "model.pt":
            content.pop("net.3.weight")
        return content


class CastsToBfloat16(Resave):
    """Halves the model for shipping, an undocumented cast: model.pt, or the
    "model" entry of a script's one file."""

    def change(self, name, content, source):
        if name == "model.pt":
            return _halved(content)
        if isinstance(content, dict) and "model" in content:
            content["model"] = _halved(content["model"])
        return content


def _halved(model: dict) -> dict:
    cast: dict[int, torch.Tensor] = {}  # a tied weight stays one tensor
    return {k: cast.setdefault(v.untyped_storage().data_ptr(), v.to(torch.bfloat16)) for k, v in model.items()}


class LosesOptimizerStep(Resave):
    """Keeps Adam's moments but not its step count (bias correction restarts)."""

    def change(self, name, content, source):
        if name == "optimizer.pt":
            for entries in content["state"].values():
                entries.pop("step")
        return content


class MixesTwoSaves(Resave):
    """Takes the optimizer from the save before: every file is a real one."""

    def change(self, name, content, source):
        if name == "optimizer.pt":
            step = int(source.name.split("_")[1])
            earlier = max(s for s in (int(p.name.split("_")[1]) for p in source.parent.glob("step_*")) if s < step)
            content = torch.load(step_dir(source.parent, earlier) / name, weights_only=True)
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


class GuessesLayout(DcpJob):
    """Decides sharded or unsharded from a file's presence, as the OLMo
    loader does from a directory's name: a `checkpoint.pt` means a
    consolidated checkpoint, which it takes for a weights export, and it
    loads the model only. Handed its own save as one torch.save file, it
    resumes with fresh optimizer moments, schedule and streams, silently."""

    def load(self, ctx: RankContext) -> Optional[int]:
        found = unanimous(ctx, lambda: read_latest(ctx.ckpt_dir))
        if found is None or not (found[1] / "checkpoint.pt").exists():
            return super().load(ctx)
        step, path = found
        full = torch.load(path / "checkpoint.pt", map_location="cpu", weights_only=True)
        set_model_state_dict(self.model, full["model"], options=StateDictOptions(full_state_dict=True))
        self.step = step
        return step


class ChecksLayout(DcpJob):
    """Looks before it loads: a step directory without DCP's `.metadata` is
    refused on every rank, naming what it holds and what to do."""

    def load(self, ctx: RankContext) -> Optional[int]:
        found = unanimous(ctx, lambda: read_latest(ctx.ckpt_dir))
        if found is not None and not (found[1] / ".metadata").exists():
            names = ", ".join(sorted(p.name for p in found[1].iterdir()))
            raise ValueError(f"{found[1]} holds no DCP checkpoint (no .metadata; it holds {names}): convert it "
                             "back with torch_save_to_dcp, or load it as what it is")
        return super().load(ctx)
