"""Plain DDP over gloo that writes an emergency checkpoint when the
scheduler gives notice: its SIGTERM handler saves the state of the moment,
then leaves. The data of step s is a function of s and the rank, so a
resume replays it.

    sigterm_save.py OUT [--steps N] [--save-every K] [--emergency-seconds S]
                        [--bug in-place]

Every K steps rank 0 writes OUT/step_N.pt the safe way (a temporary name,
fsynced, renamed into place, the directory fsynced), then every rank meets
at a barrier. Started again on a directory that holds a step_N.pt, every
rank loads the newest one and training goes on at the step after; files of
any other name (a temporary one left by a cut write) are not checkpoints.

On SIGTERM, rank 0 writes the model, optimizer and step of the moment as
OUT/step_N.pt, N the step it is at, and every rank exits. The write takes
--emergency-seconds (a checkpoint of real size on real storage does; here
it is spread over that time in chunks): a scheduler that kills after a
shorter grace cuts it. Done right, it goes to a temporary name and is
renamed into place once whole, so a cut write leaves the checkpoint before
it as it was. The bug (--bug in-place, as real handlers are written) writes
straight to the final name: a cut write leaves a truncated step_N.pt, and
the next start fails on it (or overwrote save N's complete file with it).
"""

import argparse
import io
import os
import re
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

import ckpt_harness

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=6)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--emergency-seconds", type=float, default=4.0, help="how long the emergency write takes")
parser.add_argument("--bug", action="append", default=[], choices=("in-place",))
args = parser.parse_args()
args.out.mkdir(parents=True, exist_ok=True)

dist.init_process_group("gloo", timeout=timedelta(seconds=30))
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
step = 0
CHECKPOINT = re.compile(r"step_(\d+)\.pt")


@ckpt_harness.observe
def trained():
    return {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def state(s):
    return {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": s}


def save(s):
    with ckpt_harness.saving(s):
        if rank == 0:
            final = args.out / f"step_{s}.pt"
            tmp = final.with_name(final.name + ".tmp")
            with open(tmp, "wb") as f:
                torch.save(state(s), f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
            fsync_dir(args.out)
        dist.barrier()


def on_sigterm(signum, frame):
    """Save the state of the moment, slowly, then leave."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second notice (torchrun's agent forwards one) changes nothing
    if rank == 0:
        buffer = io.BytesIO()
        torch.save(state(step), buffer)
        data = buffer.getvalue()
        final = args.out / f"step_{step}.pt"
        path = final if "in-place" in args.bug else final.with_name(final.name + ".sigterm")
        chunks = 20
        with open(path, "wb") as f:
            for i in range(chunks):
                f.write(data[i * len(data) // chunks:(i + 1) * len(data) // chunks])
                f.flush()
                time.sleep(args.emergency_seconds / chunks)
            os.fsync(f.fileno())
        if path != final:
            os.replace(path, final)
        fsync_dir(args.out)
        print(f"rank 0: emergency checkpoint of step {step} written", file=sys.stderr, flush=True)
    os._exit(0)


start = 0
saved = sorted(int(m.group(1)) for p in args.out.iterdir() if (m := CHECKPOINT.fullmatch(p.name)))
if saved:
    checkpoint = torch.load(args.out / f"step_{saved[-1]}.pt", weights_only=True)
    model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    start = checkpoint["step"]
step = start
signal.signal(signal.SIGTERM, on_sigterm)  # once loaded: a notice while loading has nothing to save
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        save(step)
dist.destroy_process_group()
