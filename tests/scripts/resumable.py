"""Plain DDP over gloo that resumes by its own logic, as a user writes it for torchrun.

Rank 0 `torch.save`s model, optimizer (SGD with momentum) and step every K
steps, then the model alone at the end; started again on a directory that
holds a checkpoint, the script resumes from the newest complete one. The
data of step s is a function of s and the rank, so a resume replays it.

    resumable.py OUT [--steps N] [--save-every K] [--staging] [--bug BUG]

Without --staging each save is written in place, into step_N/state.pt,
and any step_N holding a state.pt is taken on the next start: a commit
that is not atomic (a crash while state.pt is written leaves a torn file
that the next start loads and fails on). --staging writes each save into
tmp-checkpoint-N and renames it to checkpoint-N once written (the
Trainer's way), inside ``ckpt_harness.saving(step)``, since nothing the
harness wraps sees the rename. Bugs, each one a real one:

* forget-optimizer: the checkpoint lacks the optimizer's state;
* from-scratch: the checkpoint is never looked for;
* rename-per-node: every node's local rank 0 renames the staging directory
  (the LLaMA-Factory multi-node "No such file" report), not rank 0 alone;
* skip-barrier: rank 0 leaves the save without the barrier after the
  rename, while its peer waits there.

--no-marker leaves ``ckpt_harness.saving`` out, as a script that was never
told of the harness: its save is then the `torch.save` rank 0 makes, and
the routine around it (the barriers, the rename) is known as the function
the checkpoint I/O happens in.
"""

import argparse
import contextlib
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ckpt_harness

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--staging", action="store_true")
parser.add_argument("--bug", choices=("forget-optimizer", "from-scratch", "rename-per-node", "skip-barrier"))
parser.add_argument("--no-marker", action="store_true")
args = parser.parse_args()

dist.init_process_group("gloo")
rank, local_rank = dist.get_rank(), int(os.environ["LOCAL_RANK"])
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
prefix = "checkpoint-" if args.staging else "step_"
ckpt_harness.observe(lambda: {"torch_rng": torch.get_rng_state()})


def newest_checkpoint():
    steps = [int(m.group(1)) for p in args.out.iterdir()
             if (m := re.fullmatch(re.escape(prefix) + r"(\d+)", p.name)) and (p / "state.pt").exists()]
    return args.out / f"{prefix}{max(steps)}" if steps else None


def save(step):
    state = {"model": model.module.state_dict(), "step": step}
    if args.bug != "forget-optimizer":
        state["optimizer"] = optimizer.state_dict()
    if not args.staging:
        if rank == 0:
            (args.out / f"step_{step}").mkdir(exist_ok=True)
            torch.save(state, args.out / f"step_{step}" / "state.pt")
        dist.barrier()
        return
    with contextlib.nullcontext() if args.no_marker else ckpt_harness.saving(step):
        staging = args.out / f"tmp-checkpoint-{step}"
        if rank == 0:
            staging.mkdir(exist_ok=True)
            torch.save(state, staging / "state.pt")
        dist.barrier()
        if rank == 0 or (args.bug == "rename-per-node" and local_rank == 0):
            os.rename(staging, args.out / f"checkpoint-{step}")
        if not (args.bug == "skip-barrier" and rank == 0):
            dist.barrier()


start = 0
found = newest_checkpoint() if args.bug != "from-scratch" else None
if found is not None:
    checkpoint = torch.load(found / "state.pt")
    model.module.load_state_dict(checkpoint["model"])
    if "optimizer" in checkpoint:
        optimizer.load_state_dict(checkpoint["optimizer"])
    start = checkpoint["step"]
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        save(step)
if rank == 0:
    torch.save(model.module.state_dict(), args.out / "model.pt")
dist.barrier()
dist.destroy_process_group()
