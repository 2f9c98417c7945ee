"""Plain DDP over gloo that saves in the background, as PyTorch Lightning's
`AsyncCheckpointIO` does: each save hands a snapshot of the state to a
`ThreadPoolExecutor(max_workers=1)` and training goes on, keeping no future
(an error of the writer is kept and raised on the main thread at the next
save and at the end, Lightning's `self._error`). The data of step s is a
function of s and the rank, so a resume replays it.

    pool_writer.py OUT [--steps N] [--save-every K] [--pg-timeout S]
                       [--writer-timeout S] [--bug latest-early|live-tensors|waits-event|stage-unsynced ...]

Every K steps every rank takes the snapshot (model, optimizer, step),
inside ``ckpt_harness.saving(step)``, and rank 0 alone submits its write:
`torch.save` to a temporary file in the system's temp directory, outside
OUT (fsspec's local transaction, which Lightning writes through), fsynced,
then moved to OUT/step_N.pt, then the pointer OUT/latest, written
atomically, names it. Started again on a directory whose latest names a
checkpoint, every rank loads it and training goes on at the step after.
The pool is shut down, waiting for the writes, before the process group:
for good if a write never ends (Lightning's teardown does so too), or,
with --writer-timeout S, for at most S seconds for the last one; then the
rank leaves with exit code 1 at once (a clean exit would wait for the
stuck pool thread: the interpreter joins it).
--pg-timeout S bounds every collective, so a rank whose peer is stuck
raises instead of waiting for good. Bugs (--bug, repeatable), each one a
real one:

* latest-early: the main thread writes the pointer as it hands the write
  over, before the writer landed the file it names: a crash in between
  leaves latest naming a checkpoint that is not there, and the next start
  fails on it;
* live-tensors: the snapshot is the live `state_dict()`s, no copy: the
  writer serializes tensors the next optimizer steps change in place, a
  torn checkpoint that mixes steps (all but the last save, which nothing
  trains past);
* waits-event: the writer sets an event once it wrote the checkpoint, and
  the main thread waits on it before the next save and at the end, with no
  timeout, keeping no error (DeepSpeed's decoupled engine before 0.18.4,
  deepspeedai/DeepSpeed#7741): a writer that raises never sets it, and the
  rank waits for good;
* stage-unsynced: the temporary file is moved in without an fsync of its
  bytes (fsspec's local transaction, and so Lightning's saves): the move
  and the directory are durable, the bytes may not be, and after a power
  loss the checkpoint `latest` names comes back empty.
"""

import argparse
import copy
import os
import shutil
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
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
parser.add_argument("--pg-timeout", type=float, default=30, help="seconds a collective may wait")
parser.add_argument("--writer-timeout", type=float, help="seconds the end waits for the last write")
parser.add_argument("--bug", action="append", default=[],
                    choices=("latest-early", "live-tensors", "waits-event", "stage-unsynced"))
args = parser.parse_args()
args.out.mkdir(parents=True, exist_ok=True)

dist.init_process_group("gloo", timeout=timedelta(seconds=args.pg_timeout))
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
pool = ThreadPoolExecutor(max_workers=1)
error = None  # what the writer raised, raised again on the main thread
last_write = None  # the future of the last write handed to the pool
written = threading.Event()  # --bug waits-event: set by the writer once it wrote
written.set()
step = 0


@ckpt_harness.observe
def trained():
    return {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def point_latest(s):
    """OUT/latest names step_{s}.pt, atomically."""
    with open(args.out / "latest.tmp", "w") as f:
        f.write(f"step_{s}.pt")
        f.flush()
        os.fsync(f.fileno())
    os.replace(args.out / "latest.tmp", args.out / "latest")
    fsync_dir(args.out)


def write(snapshot, s):
    """The pool thread's task: write the snapshot, then point latest at it."""
    fd, tmp = tempfile.mkstemp(prefix="pool-writer-")
    os.close(fd)
    torch.save(snapshot, tmp)
    if "stage-unsynced" not in args.bug:
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    shutil.move(tmp, args.out / f"step_{s}.pt")
    fsync_dir(args.out)
    if "latest-early" not in args.bug:
        point_latest(s)


def keep_error(snapshot, s):
    global error
    try:
        write(snapshot, s)
    except BaseException as e:
        error = e


def signal_written(snapshot, s):
    write(snapshot, s)
    written.set()  # not in a finally: a writer that raised never sets it


def raise_error():
    if error is not None:
        raise error


def save(s):
    global last_write
    written.wait()  # --bug waits-event: no timeout (set at start otherwise)
    raise_error()
    with ckpt_harness.saving(s):
        snapshot = {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": s}
        if "live-tensors" not in args.bug:
            snapshot = copy.deepcopy(snapshot)
        if rank == 0:
            if "latest-early" in args.bug:  # as it hands the write over: the writer cannot have landed yet
                point_latest(s)
            if "waits-event" in args.bug:
                written.clear()
                last_write = pool.submit(signal_written, snapshot, s)
            else:
                last_write = pool.submit(keep_error, snapshot, s)


start = 0
if (args.out / "latest").exists():
    checkpoint = torch.load(args.out / (args.out / "latest").read_text().strip(), weights_only=True)
    model.module.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    start = checkpoint["step"]
step = start
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        save(step)
if args.writer_timeout is not None and last_write is not None:
    try:
        last_write.result(timeout=args.writer_timeout)
    except TimeoutError:  # the interpreter would wait at exit for the stuck pool thread: leave without it
        print(f"rank {rank}: the last checkpoint was not written within {args.writer_timeout:g}s",
              file=sys.stderr, flush=True)
        os._exit(1)
written.wait()
pool.shutdown(wait=True)
raise_error()
dist.destroy_process_group()
