"""Plain DDP over gloo, as a user would write it for torchrun: a few steps,
rank 0 `torch.save`s the model every K steps and at the end. Every rank
writes where torchrun put it, and the --local_rank it was given, as
DeepSpeed's launcher gives one.

    train.py OUT_DIR [STEPS [SAVE_EVERY]] [--local_rank=N]
"""

import argparse
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("steps", type=int, nargs="?", default=4)
parser.add_argument("save_every", type=int, nargs="?", default=0)
parser.add_argument("--local_rank", type=int, default=-1)
args = parser.parse_args()
out, steps, save_every = args.out, args.steps, args.save_every
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(steps):
    optimizer.zero_grad()
    model(torch.full((4, 8), float(rank + step))).sum().backward()
    optimizer.step()
    if save_every and (step + 1) % save_every == 0:
        if rank == 0:
            (out / f"step_{step + 1}").mkdir(exist_ok=True)
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict()},
                       out / f"step_{step + 1}" / "state.pt")
        dist.barrier()
layout = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")}
pg_timeout = dist.distributed_c10d._get_default_timeout(dist.Backend.GLOO).total_seconds()
(out / f"layout{rank}.json").write_text(json.dumps({**layout, "argv0": sys.argv[0], "path0": sys.path[0],
                                                    "local_rank_arg": args.local_rank,
                                                    "pg_timeout": pg_timeout}))
if rank == 0:
    torch.save(model.module.state_dict(), out / "model.pt")
dist.barrier()
dist.destroy_process_group()
