"""A tiny Megatron-Core run, checkpointed as Megatron-LM's pretraining loop checkpoints.

    torchrun --nproc-per-node 2 recipes/megatron_core/train.py SAVE_DIR [--steps 8] [--save-interval 2]

The model is Megatron-Core's own: two `MLP` blocks of `ColumnParallelLinear`
and `RowParallelLinear`, tensor-parallel over every rank (TP = world size),
built from a `TransformerConfig` with random weights. The checkpoint is
Megatron-LM's `torch_dist` format, written the way its
`megatron/training/checkpointing.py` writes it (the trainer itself,
Megatron-LM, is not a pip package; this is the part of it a user runs):

- save (every `--save-interval` iterations, and at the last if it is not one):
  rank 0 makes `SAVE_DIR/iter_{N:07d}`; every rank hands the sharded state
  dict (model, optimizer, RNG, iteration) to `dist_checkpointing.save`; a
  barrier; rank 0 writes `latest_checkpointed_iteration.txt` (opened for
  writing, the iteration written into it); with `--save-retain-interval R`
  it then deletes the previous iteration unless it is a multiple of R, in a
  thread, as Megatron-LM does without async save; a barrier.
- load (at start, when the tracker exists): the tracker's iteration, the
  maximum over ranks (a tracker that holds no number: "ERROR: Invalid
  metadata file", and `sys.exit()`, status 0, as Megatron-LM's);
  `dist_checkpointing.load` of `iter_{N:07d}` into the same sharded state
  dict; the model, the optimizer (unless `--no-load-optim`) and the RNG
  (unless `--no-load-rng`) restored; training goes on from N + 1.

The batch of iteration N is a function of N and `--seed` (Megatron's
sampler is a function of the consumed samples), and each iteration draws
from torch's RNG (a dropout mask), so a resume that does not restore the
RNG trains differently. CPU adaptations: cpu.py.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import threading
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

import cpu

HIDDEN = 16


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("save", type=Path, help="Megatron-LM's --save and --load: the checkpoints' directory")
    p.add_argument("--steps", type=int, default=8, help="--train-iters")
    p.add_argument("--save-interval", type=int, default=2)
    p.add_argument("--save-retain-interval", type=int, default=None,
                   help="keep only every R-th iteration besides the latest (Megatron-LM's, off by default)")
    p.add_argument("--no-load-optim", action="store_true", help="Megatron-LM's: do not load the optimizer state")
    p.add_argument("--no-load-rng", action="store_true", help="Megatron-LM's: do not load the RNG state")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--lr", type=float, default=1e-2)
    return p.parse_args()


def main() -> None:
    args = parse()
    dist.init_process_group(cpu.BACKEND)
    cpu.adapt()
    from megatron.core import parallel_state
    parallel_state.initialize_model_parallel(tensor_model_parallel_size=dist.get_world_size())
    set_seed(args.seed)  # Megatron-LM's _set_random_seed, before the model is built
    model = build_model()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    iteration = load_checkpoint(args, model, optimizer)
    for it in range(iteration + 1, args.steps + 1):
        x, target = batch(args.seed, it)
        out = model(x)
        mask = (torch.rand(out.shape) > 0.1).float()  # a dropout mask: torch's RNG advances every iteration
        loss = ((out * mask - target) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % args.save_interval == 0:
            save_checkpoint(args, it, model, optimizer)
    if args.steps % args.save_interval != 0 and iteration < args.steps:
        save_checkpoint(args, args.steps, model, optimizer)
    dist.barrier()
    dist.destroy_process_group()


def set_seed(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Model(torch.nn.Module):
    """Two residual Megatron-Core `MLP` blocks (fc1 column-parallel, fc2 row-parallel)."""

    def __init__(self) -> None:
        super().__init__()
        from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
        from megatron.core.transformer.mlp import MLP, MLPSubmodules
        from megatron.core.transformer.transformer_config import TransformerConfig
        config = TransformerConfig(num_layers=2, hidden_size=HIDDEN, ffn_hidden_size=4 * HIDDEN,
                                   num_attention_heads=2, tensor_model_parallel_size=dist.get_world_size(),
                                   use_cpu_initialization=cpu.NO_GPU, params_dtype=torch.float32,
                                   gradient_accumulation_fusion=False, bias_activation_fusion=False)
        spec = MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear)
        self.layers = torch.nn.ModuleList(MLP(config, spec, ffn_hidden_size=4 * HIDDEN) for _ in range(2))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            out, bias = layer(x)
            x = x + out + (bias if bias is not None else 0)
        return x

    def sharded_state_dict(self, metadata: dict) -> dict:
        sharded = {}
        for i, layer in enumerate(self.layers):
            sharded.update(layer.sharded_state_dict(prefix=f"layers.{i}.", metadata=metadata))
        return sharded


def build_model() -> Model:
    return Model().to(cpu.DEVICE)


def batch(seed: int, it: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Iteration `it`'s batch: the same on every tensor-parallel rank."""
    g = torch.Generator().manual_seed(seed * 100_003 + it)
    x = torch.randn(8, 1, HIDDEN, generator=g)
    return x, torch.sin(x)


# -- checkpoints, as megatron/training/checkpointing.py -----------------------------------------------

def checkpoint_name(save: Path, it: int) -> Path:
    return save / f"iter_{it:07d}"


def tracker(save: Path) -> Path:
    return save / "latest_checkpointed_iteration.txt"


def sharded_state_dict(model: Model, optimizer: torch.optim.Optimizer, it: int, loading: bool) -> dict:
    """What Megatron-LM's `generate_state_dict` hands `dist_checkpointing`: the model's sharded
    tensors, the optimizer's state mapped onto them (its per-parameter `step` kept once, as
    `FP32Optimizer.sharded_state_dict` keeps it), this rank's RNG as a `ShardedObject`, the iteration."""
    from megatron.core import parallel_state
    from megatron.core.dist_checkpointing.mapping import ShardedObject
    from megatron.core.dist_checkpointing.optimizer import (get_param_id_to_sharded_param_map,
                                                            optim_state_to_sharding_state)
    metadata = {"dp_cp_group": parallel_state.get_data_parallel_group(with_context_parallel=True)}
    model_sd = model.sharded_state_dict(metadata)
    if loading:  # Megatron's init_state_fn: the state's tensors exist before they are loaded into
        for group in optimizer.param_groups:
            for p in group["params"]:
                if not optimizer.state[p]:
                    optimizer.state[p]["exp_avg"] = torch.zeros_like(p.data)
                    optimizer.state[p]["exp_avg_sq"] = torch.zeros_like(p.data)
    optim_sd = optimizer.state_dict()  # its per-parameter dicts are the live ones: copied before they are changed
    optim_sd["state"] = {key: dict(state) for key, state in optim_sd["state"].items()}
    steps = [state.pop("step") for state in optim_sd["state"].values() if "step" in state]
    optim_state_to_sharding_state(optim_sd, get_param_id_to_sharded_param_map(model_sd, model.parameters()))
    if steps:
        optim_sd["state"]["common_step"] = steps[0]
    rng = {"random_rng_state": random.getstate(), "np_rng_state": np.random.get_state(),
           "torch_rng_state": torch.get_rng_state()}
    tp_rank = parallel_state.get_tensor_model_parallel_rank()
    tp_size = parallel_state.get_tensor_model_parallel_world_size()
    return {"iteration": it, "checkpoint_version": 3.0, "model": model_sd, "optimizer": optim_sd,
            "rng_state": ShardedObject("rng_state", [rng], (1, tp_size), (0, tp_rank), replica_id=0)}


def save_checkpoint(args: argparse.Namespace, it: int, model: Model, optimizer: torch.optim.Optimizer) -> None:
    from megatron.core import dist_checkpointing
    name = checkpoint_name(args.save, it)
    if dist.get_rank() == 0:
        os.makedirs(name, exist_ok=True)  # ensure_directory_exists(checkpoint_name, check_parent=False)
    dist.barrier()
    dist_checkpointing.save(sharded_state_dict(model, optimizer, it, loading=False), str(name),
                            validate_access_integrity=True)
    dist.barrier()  # "Wait so everyone is done (necessary)"
    if dist.get_rank() == 0:
        previous = int(tracker(args.save).read_text().strip()) if tracker(args.save).exists() else 0
        with open(tracker(args.save), "w") as f:
            f.write(str(it))
        retain = args.save_retain_interval
        if retain is not None and 0 < previous != it and previous % retain != 0:
            threading.Thread(target=delete_checkpoint, args=(args.save, previous)).start()
    dist.barrier()


def delete_checkpoint(save: Path, it: int) -> None:
    import shutil
    shutil.rmtree(checkpoint_name(save, it), ignore_errors=True)


def load_checkpoint(args: argparse.Namespace, model: Model, optimizer: torch.optim.Optimizer) -> int:
    from megatron.core import dist_checkpointing
    if not tracker(args.save).exists():
        return 0  # "could not find the metadata file ... will not load any checkpoints"
    try:
        found = int(tracker(args.save).read_text().strip())
    except ValueError:  # read_metadata: neither an iteration nor "release"
        if dist.get_rank() == 0:
            print(f"ERROR: Invalid metadata file {tracker(args.save)}. Exiting", flush=True)
        sys.exit()  # as Megatron-LM's: status 0
    iteration = torch.tensor([found], dtype=torch.long, device=cpu.DEVICE)
    dist.all_reduce(iteration, op=dist.ReduceOp.MAX)  # read_metadata: the maximum over the ranks
    it = int(iteration.item())
    state = dist_checkpointing.load(sharded_state_dict(model, optimizer, it, loading=True),
                                    str(checkpoint_name(args.save, it)))
    model.load_state_dict(state["model"], strict=True)
    if not args.no_load_optim:
        optim = state["optimizer"]
        step = optim["state"].pop("common_step", None)
        if step is not None:
            for param_state in optim["state"].values():
                param_state["step"] = step.clone() if torch.is_tensor(step) else step
        optimizer.load_state_dict(optim)
    if not args.no_load_rng:
        [rng] = state["rng_state"]
        random.setstate(rng["random_rng_state"])
        np.random.set_state(rng["np_rng_state"])
        torch.set_rng_state(rng["torch_rng_state"])
    if dist.get_rank() == 0:
        print(f"resumed from {checkpoint_name(args.save, it)} at iteration {it}", flush=True)
    return it


if __name__ == "__main__":  # dist_checkpointing's write workers start processes that import this module
    main()
