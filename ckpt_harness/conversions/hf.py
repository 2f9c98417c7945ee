"""A Trainer checkpoint exported with `save_pretrained` and loaded back with
`from_pretrained`: how a fine-tuned model leaves the training run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional


class SavePretrained:
    reads = "hf_trainer"
    writes = "a save_pretrained directory (config.json, model.safetensors)"
    drops = ("optim/*", "scheduler/*", "step")
    why_dropped = "a weights export: the model, without the Trainer's optimizer, schedule or step"
    requires: Mapping[str, str] = {"transformers": "ckpt-harness[hf]", "safetensors": "ckpt-harness[hf]"}

    def applies(self, ckpt_dir: Path, step: int) -> Optional[str]:
        return None

    def convert(self, ckpt_dir: Path, step: int, out: Path) -> None:
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(Path(ckpt_dir) / f"checkpoint-{step}").save_pretrained(out)

    def read(self, out: Path) -> Mapping[str, Any]:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(out)
        return {f"model/{name}": p.detach() for name, p in model.named_parameters()}


SAVE_PRETRAINED = SavePretrained()
