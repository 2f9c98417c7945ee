"""A Trainer checkpoint exported with `save_pretrained` and loaded back with
`from_pretrained`: how a fine-tuned model leaves the training run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional


class SavePretrained:
    reads = "hf_trainer"
    gives = "hf_pretrained"
    writes = "a save_pretrained directory (config.json, model.safetensors)"
    drops = ("optim/*", "scheduler/*", "step")
    why_dropped = "a weights export: the model, without the Trainer's optimizer, schedule or step"
    requires: Mapping[str, str] = {"transformers": "ckpt-harness[hf]", "safetensors": "ckpt-harness[hf]"}

    def applies(self, source: Path) -> Optional[str]:
        return None

    def convert(self, source: Path, out: Path) -> None:
        from transformers import AutoModelForCausalLM

        AutoModelForCausalLM.from_pretrained(source).save_pretrained(out)

    def read(self, out: Path) -> Mapping[str, Any]:
        from transformers import AutoModelForCausalLM

        model = AutoModelForCausalLM.from_pretrained(out)
        return {f"model/{name}": p.detach() for name, p in model.named_parameters()}

    def read_source(self, source: Path) -> Mapping[str, Any]:
        # A Trainer checkpoint is itself a save_pretrained directory (plus its trainer state).
        return self.read(source)


SAVE_PRETRAINED = SavePretrained()
