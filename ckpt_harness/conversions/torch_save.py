"""A `torch.save` checkpoint's model exported to safetensors, the format
model hubs and inference servers take: weights only."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional


class ToSafetensors:
    reads = "torch_save"
    writes = "model.safetensors (safetensors.torch.save_file of the model's state dict)"
    drops = ("optim/*", "scheduler/*", "step")
    why_dropped = "a weights export: safetensors holds the model's tensors only"
    requires: Mapping[str, str] = {"safetensors": "pip install safetensors (or ckpt-harness[hf])"}

    def applies(self, ckpt_dir: Path, step: int) -> Optional[str]:
        return None

    def convert(self, ckpt_dir: Path, step: int, out: Path) -> None:
        import torch
        from safetensors.torch import save_file

        from ckpt_harness.jobs._common import step_dir

        model = torch.load(step_dir(ckpt_dir, step) / "model.pt", map_location="cpu", weights_only=True)
        save_file(model, out / "model.safetensors")

    def read(self, out: Path) -> Mapping[str, Any]:
        from safetensors.torch import load_file

        return {f"model/{k}": v for k, v in load_file(out / "model.safetensors").items()}


TO_SAFETENSORS = ToSafetensors()
