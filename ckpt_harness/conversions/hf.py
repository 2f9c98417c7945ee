"""A Trainer checkpoint exported with `save_pretrained` and loaded back with
`from_pretrained` (how a fine-tuned model leaves the training run), and the
same checkpoint with its weights sharded (an index and several safetensors
files where the Trainer wrote one, as a larger model's checkpoint is)."""

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

#: Small enough that the tiny models of the tests and the built-in job span several shards.
SHARD_SIZE = "20KB"


class ShardedWeights:
    reads = "hf_trainer"
    gives = "hf_trainer_sharded"
    writes = (f"the checkpoint with its weights as sharded safetensors (save_pretrained(max_shard_size="
              f"{SHARD_SIZE!r}): model.safetensors.index.json and its shards), the Trainer's other files as they were")
    drops: tuple[str, ...] = ()
    why_dropped = ""
    requires: Mapping[str, str] = {"transformers": "ckpt-harness[hf]", "safetensors": "ckpt-harness[hf]"}

    def applies(self, source: Path) -> Optional[str]:
        return None if (source / "optimizer.pt").exists() else (
            "the save holds no optimizer.pt: not a Trainer checkpoint to resume from")

    def convert(self, source: Path, out: Path) -> None:
        import shutil

        from transformers import AutoModelForCausalLM

        weights = ("model.safetensors", "pytorch_model.bin")
        for entry in source.iterdir():
            if entry.name not in weights and entry.is_file():
                shutil.copy2(entry, out / entry.name)
        AutoModelForCausalLM.from_pretrained(source).save_pretrained(out, max_shard_size=SHARD_SIZE)
        if not (out / "model.safetensors.index.json").exists():
            raise RuntimeError(f"the model fits in one shard of {SHARD_SIZE}: nothing sharded")

    def read(self, out: Path) -> Mapping[str, Any]:
        from ckpt_harness.conversions import _layouts

        return _layouts.trainer_checkpoint(out)

    def read_source(self, source: Path) -> Mapping[str, Any]:
        return self.read(source)


SHARDED_WEIGHTS = ShardedWeights()
