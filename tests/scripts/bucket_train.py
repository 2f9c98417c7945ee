"""Plain DDP over gloo that saves to, and resumes from, a URL through fsspec:
a bucket (``s3://...``) as a user's script writes one, or a local directory.

    bucket_train.py URL [--steps N] [--save-every K] [--bug latest-first]

Rank 0 writes each save's state (model, optimizer with momentum, step) as
one object, ``step_N/state.pt``, then puts ``latest`` naming it: on a
bucket an object appears whole once its upload completed, so the pointer
put last is the commit. Started again on a URL that holds a ``latest``, the
script resumes from the save it names. The data of step s is a function of
s and the rank, so a resume replays it.

* latest-first: ``latest`` is put before the state it names (a commit
  marker that can land before its data: not atomic).
"""

import argparse

import fsspec
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("url")
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--bug", choices=("latest-first",))
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
fs, root = fsspec.url_to_fs(args.url)


def save(step: int) -> None:
    def state() -> None:
        fs.makedirs(f"{root}/step_{step}", exist_ok=True)  # a local directory's; nothing on a bucket
        with fs.open(f"{root}/step_{step}/state.pt", "wb") as f:
            torch.save({"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, f)

    if args.bug == "latest-first":
        fs.pipe_file(f"{root}/latest", str(step).encode())
        state()
    else:
        state()
        fs.pipe_file(f"{root}/latest", str(step).encode())


start = 0
if fs.exists(f"{root}/latest"):
    start = int(fs.cat_file(f"{root}/latest"))
    with fs.open(f"{root}/step_{start}/state.pt", "rb") as f:
        loaded = torch.load(f)
    model.module.load_state_dict(loaded["model"])
    optimizer.load_state_dict(loaded["optimizer"])
for step in range(start, args.steps):
    optimizer.zero_grad()
    model(torch.full((4, 8), float(rank + step))).sum().backward()
    optimizer.step()
    if (step + 1) % args.save_every == 0:
        if rank == 0:
            save(step + 1)
        dist.barrier()
dist.destroy_process_group()
