"""Plain DDP over gloo whose checkpoints go through tinyckpt, the test package with several releases
(tests/tinypkgs.py): the script a "releases as an axis" test runs under each release's environment, as a user
writes it for torchrun.

    tiny_upgrade.py CKPT_DIR [--steps N] [--save-every K] [--seed S]

Rank 0 saves model, optimizer (Adam) and step every K steps with
``tinyckpt.save(f"{ckpt_dir}/step_{N}.pt", ...)``, a barrier after; started again on a directory that holds a
checkpoint, every rank resumes from ``tinyckpt.latest(ckpt_dir)``. The data of step s is a function of s and
the rank, so a resume replays it. Rank 0 says which tinyckpt it ran with and where it resumed from:

    tinyckpt 1.1.0: resumed from DIR/step_4.pt at step 4
    tinyckpt 1.1.0: trained steps 5-6

The model and step are indexed as a user does (``state["model"]``), and the optimizer restored if the
checkpoint has one (as a script that also resumes from weights-only checkpoints does): a release that loads
another's checkpoint without its optimizer trains on with a fresh one, without a word.
"""

import argparse
from pathlib import Path

import tinyckpt
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("ckpt_dir", type=Path)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(args.seed)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
args.ckpt_dir.mkdir(parents=True, exist_ok=True)


def report(line):
    if rank == 0:
        print(f"tinyckpt {tinyckpt.__version__}: {line}", flush=True)


start = 0
found = tinyckpt.latest(str(args.ckpt_dir))
if found is not None:
    state = tinyckpt.load(found)
    model.module.load_state_dict(state["model"])
    if "optimizer" in state:
        optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
    report(f"resumed from {found} at step {start}")
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        if rank == 0:
            tinyckpt.save(f"{args.ckpt_dir}/step_{step}.pt",
                          {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
        dist.barrier()
report(f"trained steps {start + 1}-{args.steps}")
dist.destroy_process_group()
