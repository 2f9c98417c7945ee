"""Training functions a torchrun worker calls with the checkpoint directory
(the `callable` target kind of tests/extension): a correct one, and its
twin that forgets the optimizer's state in its checkpoint.

DDP over gloo, saves every 2 of 4 steps into a staging directory renamed
into place by rank 0, resumes from the newest complete checkpoint; the data
of step s is a function of s and the rank, so a resume replays it.
"""

import os
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ckpt_harness

STEPS, SAVE_EVERY = 4, 2


def train(ckpt_dir: str, forget_optimizer: bool = False) -> None:
    out = Path(ckpt_dir)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(8, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    steps = [int(m.group(1)) for p in out.iterdir() if (m := re.fullmatch(r"checkpoint-(\d+)", p.name))]
    start = 0
    if steps:
        state = torch.load(out / f"checkpoint-{max(steps)}" / "state.pt")
        model.module.load_state_dict(state["model"])
        if "optimizer" in state:
            optimizer.load_state_dict(state["optimizer"])
        start = state["step"]
    for step in range(start + 1, STEPS + 1):
        data = torch.Generator().manual_seed(1000 * step + rank)
        optimizer.zero_grad()
        model(torch.randn(4, 8, generator=data)).square().sum().backward()
        optimizer.step()
        if step % SAVE_EVERY == 0:
            with ckpt_harness.saving(step):
                staging = out / f"tmp-checkpoint-{step}"
                if rank == 0:
                    staging.mkdir(exist_ok=True)
                    state = {"model": model.module.state_dict(), "step": step}
                    if not forget_optimizer:
                        state["optimizer"] = optimizer.state_dict()
                    torch.save(state, staging / "state.pt")
                dist.barrier()
                if rank == 0:
                    os.rename(staging, out / f"checkpoint-{step}")
                dist.barrier()
    dist.destroy_process_group()


def train_without_optimizer(ckpt_dir: str) -> None:
    """The planted twin: its checkpoint lacks the optimizer's momentum."""
    train(ckpt_dir, forget_optimizer=True)
