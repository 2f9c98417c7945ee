"""Conversions of a `torch.save` checkpoint directory: its model exported to
safetensors (what model hubs and inference servers take: weights only), and
the whole save as one DCP checkpoint (`format_utils.torch_save_to_dcp`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional

from ckpt_harness.conversions import _layouts


class _FromTorchSave:
    reads = "torch_save"
    requires: Mapping[str, str] = {}

    def applies(self, source: Path) -> Optional[str]:
        return None

    def read_source(self, source: Path) -> Mapping[str, Any]:
        """Every file of the save by its name's stem, as `torch.load` gives it."""
        return _layouts.torch_save_job(source)


class ToSafetensors(_FromTorchSave):
    gives = "safetensors"
    writes = "model.safetensors (safetensors.torch.save_file of the model's state dict)"
    drops = ("optim/*", "scheduler/*", "scaler/*", "step")
    why_dropped = "a weights export: safetensors holds the model's tensors only"
    requires: Mapping[str, str] = {"safetensors": "pip install safetensors (or ckpt-harness[hf])"}

    def applies(self, source: Path) -> Optional[str]:
        return None if (source / "model.pt").exists() else (
            "the save holds no model.pt, the file of model weights this export takes")

    def read_source(self, source: Path) -> Mapping[str, Any]:
        import torch

        return {f"model/{k}": v for k, v in torch.load(source / "model.pt", map_location="cpu",
                                                       weights_only=True).items()}

    def convert(self, source: Path, out: Path) -> None:
        import torch
        from safetensors.torch import save_file

        save_file(torch.load(source / "model.pt", map_location="cpu", weights_only=True), out / "model.safetensors")

    def read(self, out: Path) -> Mapping[str, Any]:
        from safetensors.torch import load_file

        return {f"model/{k}": v for k, v in load_file(out / "model.safetensors").items()}


class ToDcp(_FromTorchSave):
    gives = "dcp"
    writes = ("a DCP directory of every file of the save, keyed by file name (torch_save_to_dcp of "
              "{'model': ..., 'optimizer': ..., ...})")
    drops: tuple[str, ...] = ()
    why_dropped = ""

    def convert(self, source: Path, out: Path) -> None:
        import torch
        from torch.distributed.checkpoint.format_utils import torch_save_to_dcp

        merged = out / "merged.pt"
        torch.save({p.stem: torch.load(p, map_location="cpu", weights_only=True) for p in sorted(source.glob("*.pt"))},
                   merged)
        torch_save_to_dcp(merged, out)
        merged.unlink()

    def read(self, out: Path) -> Mapping[str, Any]:
        from torch.distributed.checkpoint.state_dict_loader import _load_state_dict_from_keys

        return _layouts.torch_save_files(_load_state_dict_from_keys(checkpoint_id=out), str(out))


TO_SAFETENSORS = ToSafetensors()
TO_DCP = ToDcp()
