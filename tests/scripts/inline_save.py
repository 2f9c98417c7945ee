"""Plain DDP over gloo whose save is written inline in its training loop, as many scripts have it.

No function of its own holds the save: rank 0 writes ``step_N.pt`` to a
temporary name and renames it, and every rank meets in a barrier, in the
loop's body; the last step saves too (the final checkpoint). Each step
all-reduces its loss to log it (a collective of Python's, which the
harness sees). Started again on a directory that holds a checkpoint, the
script resumes from the newest one. Knows nothing of the harness.

    inline_save.py OUT [--steps N] [--save-every K] [--pg-timeout S] [--raise-in-step N] [--bug BUG]

``--raise-in-step N``: rank 1 raises a RuntimeError in training step N,
after its forward and before its backward (so before that step's optimizer
step): step 1 is before any save and any optimizer step, step 3 (of the
default 4, saving every 2) between saves. The script's own failure in a
train step, outside its saves: an ERROR, never a FAIL.

Bugs:

* rank0-collective-in-final-save: before writing the final checkpoint, rank
  0 alone all-reduces a metric to log it; its peers go on to the barrier
  that closes the save. The collectives never match: training finished,
  and the final save hangs (the seeds' own failure, in its plainest form).
* rank0-collective-in-train-step: the same mismatch in the last training
  step, after every save but the final one: the script's own failure, not
  its checkpointing's.
* rank0-rename-raises: in the save of the first step it saves, rank 0
  renames a temporary name it never wrote (``step_N.tmp``, not
  ``step_N.pt.tmp``): FileNotFoundError inside the inline save, which is
  the checkpointing's failure.
"""

import argparse
import os
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--pg-timeout", type=float, default=1800.0)
parser.add_argument("--raise-in-step", type=int, default=0)
parser.add_argument("--bug", choices=("rank0-collective-in-final-save", "rank0-collective-in-train-step",
                                      "rank0-rename-raises"))
args = parser.parse_args()

dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout))
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
args.out.mkdir(parents=True, exist_ok=True)

start = 0
saved = sorted(int(p.stem.partition("_")[2]) for p in args.out.glob("step_*.pt"))
if saved:
    checkpoint = torch.load(args.out / f"step_{saved[-1]}.pt")
    model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    start = checkpoint["step"]

for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    loss = model(torch.randn(4, 8, generator=data)).square().sum()
    if step == args.raise_in_step and rank == 1:
        raise RuntimeError(f"rank 1 fails in training step {step}")
    loss.backward()
    optimizer.step()
    if args.bug == "rank0-collective-in-train-step" and step == args.steps and rank == 0:
        dist.barrier()
    logged = loss.detach().clone()
    dist.all_reduce(logged)
    if step % args.save_every == 0 or step == args.steps:
        if args.bug == "rank0-collective-in-final-save" and step == args.steps and rank == 0:
            dist.all_reduce(logged)  # a metric for the final log line, on rank 0 alone
        if rank == 0:
            state = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}
            torch.save(state, args.out / f"step_{step}.pt.tmp")
            written = args.out / f"step_{step}.pt.tmp"
            if args.bug == "rank0-rename-raises":
                written = args.out / f"step_{step}.tmp"  # a name it never wrote
            os.replace(written, args.out / f"step_{step}.pt")
        dist.barrier()  # closes the save
dist.destroy_process_group()
