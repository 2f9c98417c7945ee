"""DeepSpeed's conversions of a ZeRO checkpoint: `zero_to_fp32` (the
partitions consolidated into one fp32 state dict of the model, the file a
ZeRO run is shipped as) and `ds_to_universal` (the whole checkpoint, one
tensor per parameter and state, loadable at any world size)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Optional


class ZeroToFp32:
    reads = "deepspeed"
    gives = "fp32_state_dict"
    writes = "pytorch_model.bin (zero_to_fp32.convert_zero_checkpoint_to_fp32_state_dict)"
    #: What it gives are the optimizer's fp32 master copies, consolidated
    #: (`optim/<name>/param` of the job's full state): the model itself in
    #: stages 1-2 of an fp32 run, more precise than it in a bf16 one.
    drops = ("model/*", "optim/*/exp_avg", "optim/*/exp_avg_sq", "optim/*/momentum_buffer", "optim/*/sum",
             "optim/step", "optim/param_groups/*", "scheduler/*", "step", "engine/*")
    why_dropped = ("a weights export: the fp32 master weights, without the model in its training dtype, the "
                   "optimizer's state, schedule or counters")
    requires: Mapping[str, str] = {"deepspeed": "ckpt-harness[deepspeed]"}

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

        return {f"optim/{k}/param": v
                for k, v in torch.load(out / "pytorch_model.bin", map_location="cpu", weights_only=True).items()}

    def read_source(self, source: Path) -> Mapping[str, Any]:
        from ckpt_harness.conversions import NoReader

        raise NoReader("a ZeRO checkpoint's partitions are read by DeepSpeed's own consolidation, the conversion "
                       "under test: it is judged against a job's full state (give the training as a Job)")


ZERO_TO_FP32 = ZeroToFp32()


class ZeroToUniversal(ZeroToFp32):
    """DeepSpeed's `ds_to_universal`: the partitions of every rank as one
    tensor per parameter and state (`zero/<name>/fp32.pt`, `exp_avg.pt`,
    ...), next to the model-states file: what a ZeRO run resumes from at
    another world size (`"checkpoint": {"load_universal": true}`)."""

    gives = "deepspeed_universal"
    writes = "a universal checkpoint (deepspeed.checkpoint.ds_to_universal: zero/<param>/*.pt, model states)"
    drops: tuple[str, ...] = ()
    why_dropped = ""

    def convert(self, source: Path, out: Path) -> None:
        from ckpt_harness.jobs.deepspeed_job import convert_to_universal

        convert_to_universal(source, out)

    def read(self, out: Path) -> Mapping[str, Any]:
        # As DeepSpeed's universal loader reads them: its files hold config
        # objects besides tensors, so they are full pickles (weights_only=False),
        # written moments ago by the conversion under test.
        import torch

        from ckpt_harness.conversions._layouts import from_scheduler

        def load(path: Path) -> Any:
            return torch.load(path, map_location="cpu", weights_only=False)

        # Rank 0's model states: the one file in stages 1-2, ZeRO-3's first of one per rank.
        # ZeRO-3 keeps an empty module there and each tensor flat: its shapes are the model
        # states' `param_shapes`, its weights the fp32 masters in the module's dtype, as
        # DeepSpeed's universal load sets them.
        zero3 = not (out / "mp_rank_00_model_states.pt").exists()
        states = load(out / ("zero_pp_rank_0_mp_rank_00_model_states.pt" if zero3 else "mp_rank_00_model_states.pt"))
        shapes = {name: shape for group in states["param_shapes"] for name, shape in group.items()} if zero3 else {}

        def tensor(path: Path, name: str) -> Any:
            value = load(path)
            value = value["param"] if isinstance(value, dict) else value
            return value.view(shapes[name]) if zero3 else value

        found: dict[str, Any] = {}
        steps = []
        for param in sorted(p for p in (out / "zero").iterdir() if p.is_dir()):
            found[f"optim/{param.name}/param"] = tensor(param / "fp32.pt", param.name)
            for key in ("exp_avg", "exp_avg_sq"):
                if (param / f"{key}.pt").exists():
                    found[f"optim/{param.name}/{key}"] = tensor(param / f"{key}.pt", param.name)
            if (param / "step.pt").exists():
                steps.append(load(param / "step.pt"))
        optimizer = load(out / "zero" / "optimizer_state.pt")
        if not steps and zero3:  # one step for the whole flat group, in its optimizer state
            steps = [entry["step"] for entry in optimizer["optimizer_state_dict"]["state"].values() if "step" in entry]
        if steps:
            found["optim/step"] = steps[0]
        for i, group in enumerate(optimizer["param_groups"]):
            found.update({f"optim/param_groups/{i}/{k}": v for k, v in group.items() if k != "params"})
        if zero3:
            found.update({f"model/{name}": found[f"optim/{name}/param"].to(empty.dtype)
                          for name, empty in states["module"].items()})
        else:
            found.update({f"model/{k}": v for k, v in states["module"].items()})
        found.update({f"engine/{k}": states[k] for k in ("global_steps", "global_samples", "skipped_steps")})
        found.update(from_scheduler(states["lr_scheduler"]))
        found["step"] = states["extra"]["step"]
        return found


ZERO_TO_UNIVERSAL = ZeroToUniversal()
