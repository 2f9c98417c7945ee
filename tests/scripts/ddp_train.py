"""Plain DDP over gloo, as a user would write it for torchrun: a few steps,
then rank 0 `torch.save`s the model. Every rank writes where torchrun put it."""

import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

out = Path(sys.argv[1])
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(steps):
    optimizer.zero_grad()
    model(torch.full((4, 8), float(rank + step))).sum().backward()
    optimizer.step()
layout = {k: os.environ[k] for k in ("RANK", "LOCAL_RANK", "GROUP_RANK", "LOCAL_WORLD_SIZE", "WORLD_SIZE")}
(out / f"layout{rank}.json").write_text(json.dumps({**layout, "argv0": sys.argv[0], "path0": sys.path[0]}))
if rank == 0:
    torch.save(model.module.state_dict(), out / "model.pt")
dist.barrier()
dist.destroy_process_group()
