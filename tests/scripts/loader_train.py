"""Plain DDP whose data loader keeps a position in the checkpoint, as torchdata's
StatefulDataLoader and Megatron's consumed-samples counter do (issue 64, item 6).

    loader_train.py OUT [--steps N] [--save-every K] [--loader correct|inert|replay]

Rank 0 `torch.save`s model, optimizer (SGD with momentum), step and the
loader's state every K steps into OUT/step_N.pt (written to a temporary
name and renamed); started again, the script resumes from the newest one.
Batch i of the loader is a function of i and the rank.

* correct: the loader saves how many batches it handed out (`consumed`)
  and starts there when loaded.
* inert: it also counts how often it was loaded (`resumes`), bookkeeping
  that nothing reads back: a resumed run's saves differ from an
  uninterrupted run's in that key alone, and training is the same however
  often it resumes.
* replay: it saves the batches it handed out since the process started,
  not since the run started. The first resume is right (the checkpoint it
  reads was written by a run that never resumed), and its saves differ
  only in `consumed`; a second resume, from a save a resumed run wrote,
  starts the data over from an earlier batch: replayed data, other weights.
"""

import argparse
import os
import re
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=8)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--loader", choices=("correct", "inert", "replay"), default="correct")
args = parser.parse_args()


class Loader:
    def __init__(self, rank: int):
        self.rank, self.position, self.since_start, self.resumes = rank, 0, 0, 0

    def __next__(self) -> torch.Tensor:
        batch = torch.randn(4, 8, generator=torch.Generator().manual_seed(1000 * self.position + self.rank))
        self.position += 1
        self.since_start += 1
        return batch

    def state_dict(self) -> dict:
        state = {"consumed": self.since_start if args.loader == "replay" else self.position}
        if args.loader == "inert":
            state["resumes"] = self.resumes
        return state

    def load_state_dict(self, state: dict) -> None:
        self.position = state["consumed"]
        self.resumes = state.get("resumes", 0) + 1


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
loader = Loader(rank)
# every rank saves its own loader's position: rank R's file step_N.rankR.pt
saved = {int(m.group(1)): p for p in args.out.iterdir() if (m := re.fullmatch(rf"step_(\d+)\.rank{rank}\.pt", p.name))}
start = 0
if saved:
    checkpoint = torch.load(saved[max(saved)])
    model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    loader.load_state_dict(checkpoint["loader"])
    start = checkpoint["step"]
for step in range(start + 1, args.steps + 1):
    optimizer.zero_grad()
    model(next(loader)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step,
                 "loader": loader.state_dict()}
        final = args.out / f"step_{step}.rank{rank}.pt"
        torch.save(state, f"{final}.tmp")
        os.replace(f"{final}.tmp", final)
        dist.barrier()
dist.destroy_process_group()
