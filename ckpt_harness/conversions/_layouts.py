"""The built-in jobs' checkpoints read back under the keys of their `full_state`.

A conversion's output is compared with the state the job had when the save
returned, so its reader must say where each piece of a framework's state
dict lives in the job's own vocabulary. These are the vocabularies of the
state dicts the built-in jobs hand their frameworks; the frameworks' tensors
and values are passed through untouched (no cast, no copy that could hide a
difference). A save the built-in job did not write (a script's own state
dict) is read key for key as saved (`plain`), the same on both sides of
the comparison. Imported only in the process that runs a conversion.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any, Mapping


def from_optimizer(optim: Mapping[str, Any], names: Mapping[Any, str]) -> dict[str, Any]:
    """An optimizer's `state_dict()` (`names` maps its parameter ids, or
    FQNs as `get_optimizer_state_dict` writes them, to parameter names)."""
    out: dict[str, Any] = {}
    strangers = [pid for pid in optim["state"] if pid not in names]
    if strangers:  # `Optimizer.load_state_dict` would keep them aside, restoring none
        raise ValueError(f"the optimizer's state is keyed by {_ids(strangers)}, its param_groups list "
                         f"{_ids(list(names))}: Optimizer.load_state_dict restores none of that state")
    for pid, entries in optim["state"].items():
        for key, value in entries.items():
            out[f"optim/{names[pid]}/{key}"] = value
    for i, group in enumerate(optim["param_groups"]):
        for key, value in group.items():
            if key != "params":
                out[f"optim/param_groups/{i}/{key}"] = value
    return out


def from_scheduler(scheduler: Mapping[str, Any]) -> dict[str, Any]:
    return {f"scheduler/{k}": list(v) if isinstance(v, list) else v for k, v in scheduler.items()}


def from_extra(extra: Mapping[str, Any]) -> dict[str, Any]:
    """What a built-in job's per-rank extras hold that is the same on every
    rank (rank 0's is read): the step, and the fp16 loss scaler's state."""
    return {"step": extra["step"], **{f"scaler/{k}": v for k, v in extra.get("scaler", {}).items()}}


#: The top-level keys of `jobs.dcp.DcpJob`'s state dict.
DCP_JOB = ("model", "optim", "extra")
#: The files (by stem) of a `jobs.torch_save.TorchSaveJob` save.
TORCH_SAVE_JOB = ("model", "optimizer", "scheduler", "rng_rank0")


def plain(obj: Any, key: str = "") -> dict[str, Any]:
    """A nested checkpoint key for key as saved: "/"-joined paths to its
    leaves, untouched. A key that is not a string keeps its type in the
    path ("state/int:0/exp_avg"), so a dict keyed 0, 1 read back keyed
    "0", "1" (which `Optimizer.load_state_dict` would not match) differs;
    a list's items are "[i]"."""
    if isinstance(obj, Mapping):
        items = [(k if isinstance(k, str) else f"{type(k).__name__}:{k!r}", v) for k, v in obj.items()]
    elif isinstance(obj, (list, tuple)) and not _leaf_list(obj):
        items = [(f"[{i}]", v) for i, v in enumerate(obj)]
    else:
        return {key: _bytes(obj) if isinstance(obj, io.BytesIO) else obj}
    out: dict[str, Any] = {}
    for k, v in items:
        out.update(plain(v, f"{key}/{k}" if key else k))
    return out


def _leaf_list(items: Any) -> bool:
    """A list of plain values (a parameter group's ids, betas): one leaf."""
    return all(isinstance(v, (int, float, str, bool)) or v is None for v in items)


def dcp_job(state_dict: Mapping[str, Any]) -> dict[str, Any]:
    """The state dict `jobs.dcp.DcpJob` hands `dcp.save` (nested, as
    `dcp_to_torch_save` and an empty load plan give it back): model and
    optimizer by FQN, and each rank's extras as a `torch.save` blob, whose
    scheduler and step are the same on every rank (rank 0's is read).
    Another state dict (a script's) is read `plain`."""
    import torch

    if not all(key in state_dict for key in DCP_JOB):
        return plain(state_dict)
    out = {f"model/{k}": v for k, v in state_dict["model"].items()}
    optim = state_dict["optim"]
    out.update(from_optimizer(optim, {name: name for name in optim["state"]}))
    extra = torch.load(io.BytesIO(_bytes(state_dict["extra"]["rank0"])), map_location="cpu", weights_only=True)
    out.update(from_scheduler(extra["scheduler"]))
    out.update(from_extra(extra))
    return out


def torch_save_job(path: Path) -> dict[str, Any]:
    """A step directory of `jobs.torch_save.TorchSaveJob`, each file loaded as its `load` does."""
    import torch

    return torch_save_files({p.stem: torch.load(p, map_location="cpu", weights_only=True)
                             for p in sorted(path.glob("*.pt"))}, str(path))


def torch_save_files(files: Mapping[str, Any], where: str) -> dict[str, Any]:
    """The files of a `TorchSaveJob` save by name ("model", "optimizer",
    "scheduler", "rng_rank0", ...): the optimizer's parameter ids are the
    model's parameters in order, and a tensor that shares its storage with
    an earlier one (a tied weight) is that parameter, listed once, as
    `named_parameters` lists it. Other files (a script's) are read `plain`."""
    if not all(name in files for name in TORCH_SAVE_JOB):
        return plain(files)
    model = files["model"]
    names = distinct(model)
    optim = files["optimizer"]
    ids = [pid for group in optim["param_groups"] for pid in group["params"]]
    if len(ids) != len(names):
        raise ValueError(f"{where}: the optimizer has {len(ids)} parameters, the model {len(names)}")
    out = {f"model/{name}": model[name] for name in names}
    out.update(from_optimizer(optim, dict(zip(ids, names))))
    out.update(from_scheduler(files["scheduler"]))
    out.update(from_extra(files["rng_rank0"]))
    return out


def trainer_checkpoint(path: Path) -> dict[str, Any]:
    """A `transformers.Trainer` checkpoint directory, loaded as the Trainer
    resumes from it: the model by `from_pretrained` (one safetensors file
    or an index of shards), the optimizer's parameter ids as the Trainer
    numbers them (its weight-decay group, then the rest, each in
    `named_parameters` order), the schedule, and `global_step`."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, Trainer

    model = AutoModelForCausalLM.from_pretrained(path)
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    decay = set(Trainer.get_decay_parameter_names(None, model))  # reads no instance state
    groups = [[n for n, _ in named if n in decay], [n for n, _ in named if n not in decay]]
    optim = torch.load(path / "optimizer.pt", map_location="cpu", weights_only=True)
    ids: dict[Any, str] = {}
    for group, names in zip(optim["param_groups"], groups):
        if len(group["params"]) != len(names):
            raise ValueError(f"{path}: an optimizer group of {len(group['params'])} parameters where the Trainer "
                             f"groups {len(names)}")
        ids.update(zip(group["params"], names))
    out = {f"model/{name}": p.detach() for name, p in model.named_parameters()}
    out.update(from_optimizer(optim, ids))
    scheduler = torch.load(path / "scheduler.pt", map_location="cpu", weights_only=True)
    out.update(from_scheduler({k: v for k, v in scheduler.items() if k != "lr_lambdas"}))
    out["step"] = json.loads((path / "trainer_state.json").read_text())["global_step"]
    return out


def distinct(tensors: Mapping[str, Any]) -> list[str]:
    """The keys whose tensor shares its storage with no earlier key's."""
    seen: set[int] = set()
    names = []
    for name, tensor in tensors.items():
        pointer = tensor.untyped_storage().data_ptr()
        if pointer not in seen:
            seen.add(pointer)
            names.append(name)
    return names


def _bytes(value: Any) -> bytes:
    return value.getvalue() if isinstance(value, io.BytesIO) else value


def _ids(ids: list[Any]) -> str:
    shown = ", ".join(repr(i) for i in ids[:3]) + (", ..." if len(ids) > 3 else "")
    return f"{shown} ({', '.join(sorted({type(i).__name__ for i in ids}))})"
