"""DeepSpeed's `zero_to_fp32`: a ZeRO checkpoint's partitions consolidated
into one fp32 state dict of the model, the file a ZeRO run is shipped as."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional


class ZeroToFp32:
    reads = "deepspeed"
    gives = "fp32_state_dict"
    writes = "pytorch_model.bin (zero_to_fp32.convert_zero_checkpoint_to_fp32_state_dict)"
    drops = ("optim/*", "scheduler/*", "step", "engine/*")
    why_dropped = "a weights export: the fp32 model, without optimizer, schedule or counters"
    requires: Mapping[str, str] = {"deepspeed": "ckpt-harness[deepspeed]"}

    def source(self, ckpt_dir: Path, step: int) -> Path:
        return Path(ckpt_dir) / f"global_step{step}"  # the tag DeepSpeedJob saves under

    def applies(self, source: Path) -> Optional[str]:
        # DeepSpeed copies the script next to the checkpoints it is for (ZeRO 1-3).
        if not (source.parent / "zero_to_fp32.py").exists():
            return ("DeepSpeed ships zero_to_fp32.py with ZeRO stage 1-3 checkpoints only, and this one has none "
                    "(stage 0 keeps the whole model in mp_rank_00_model_states.pt)")
        return None

    def convert(self, source: Path, out: Path) -> None:
        from deepspeed.utils.zero_to_fp32 import convert_zero_checkpoint_to_fp32_state_dict

        convert_zero_checkpoint_to_fp32_state_dict(str(source.parent), str(out), tag=source.name)

    def read(self, out: Path) -> Mapping[str, Any]:
        import torch

        return {f"model/{k}": v
                for k, v in torch.load(out / "pytorch_model.bin", map_location="cpu", weights_only=True).items()}


ZERO_TO_FP32 = ZeroToFp32()
