"""A trainer in torchtitan's shape, as its checkpoint manager does it:
FSDP2 (`fully_shard`) over gloo, AdamW, each save a `dcp.save` of the
model's and optimizer's distributed state dicts and the train state into
OUT/step-N, and a start that resumes from the newest step-N directory
holding DCP's `.metadata` (torchtitan's `_find_load_step`; rank 0 writes
it last, once every rank's shard is in). The data of step s is a function
of s and the rank, so a resume replays it.

    titan_train.py OUT [--steps N] [--save-every K] [--bug newest-dir]

newest-dir: resume from the newest step-N directory, `.metadata` or not: a
save cut short leaves a directory DCP cannot load, and the start fails.
"""

import argparse
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.fsdp import fully_shard

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--bug", choices=("newest-dir",))
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)


def find_load_step(folder: Path) -> int:
    """The newest step with a complete checkpoint; -1: none."""
    steps = []
    for name in os.listdir(folder) if folder.is_dir() else ():
        found = re.fullmatch(r"step-(\d+)", name)
        if found and (args.bug == "newest-dir" or (folder / name / ".metadata").is_file()):
            steps.append(int(found[1]))
    return max(steps, default=-1)


def states() -> dict:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


start = find_load_step(args.out)
if start >= 0:
    state = {**states(), "train_state": {"step": torch.tensor(0)}}
    dcp.load(state, checkpoint_id=str(args.out / f"step-{start}"))
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    assert int(state["train_state"]["step"]) == start
for step in range(max(start, 0) + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        dcp.save({**states(), "train_state": {"step": torch.tensor(step)}},
                 checkpoint_id=str(args.out / f"step-{step}"))
dist.barrier()
dist.destroy_process_group()
