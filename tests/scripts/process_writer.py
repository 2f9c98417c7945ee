"""A trainer whose checkpoints a process of its own writes, as DeepSpeed's
decoupled checkpoint engine does (`"checkpoint": {"writer": {"decoupled":
true}}`): rank 0 starts a checkpoint process at start-up and, at each
save, puts the state on its queue and returns; the next step commits the
save (a commit message on the queue, the process's answer once everything
before it is written) and only then names it in `latest`. The data of
step s is a function of s and the rank, so a resume replays it.

    process_writer.py OUT [--steps N] [--save-every K] [--bug never-closed]

At the end the trainer commits its last save and tells the process to
exit (DeepSpeed's `engine.destroy()`). never-closed: it returns without
(a script that never calls `destroy()`): the process, not a daemon, waits
on its queue for good, and the interpreter's exit waits for it
(multiprocessing joins its children at exit): training is done and the
job never ends, its last save written but never named in `latest`.

The process is forked (DeepSpeed spawns: a fresh interpreter importing
torch, seconds for nothing this fixture needs), and the state goes on the
queue serialized (DeepSpeed's queue moves the tensors to shared memory:
the commit before the next optimizer step is what keeps them whole).
"""

import argparse
import io
import multiprocessing
from pathlib import Path

import torch
import torch.distributed as dist

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--bug", action="append", default=[], choices=("never-closed",))
args = parser.parse_args()

COMMIT, EXIT = "commit", "exit"


def write_checkpoints(queue, committed) -> None:
    """The checkpoint process: write what comes, answer a commit once all before it is written."""
    while True:
        item = queue.get()
        if item == EXIT:
            return
        if item == COMMIT:
            committed.set()
            continue
        data, path = item
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
writer = None
if rank == 0:
    context = multiprocessing.get_context("fork")
    queue, committed = context.SimpleQueue(), context.Event()
    writer = context.Process(target=write_checkpoints, args=(queue, committed), name="checkpoint process")
    writer.start()
pending = None


def commit() -> None:
    """Wait until the checkpoint process wrote the pending save, then name it in `latest`."""
    global pending
    if pending is not None and writer is not None:
        queue.put(COMMIT)
        committed.wait()
        committed.clear()
        (args.out / "latest").write_text(pending)
    pending = None
    dist.barrier()


latest = args.out / "latest"
start = 0
if latest.exists():
    state = torch.load(args.out / latest.read_text() / "state.pt")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    start = state["step"]
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    for p in model.parameters():
        dist.all_reduce(p.grad)
    commit()  # the save before, committed at the next step as DeepSpeed's engine.step() does
    optimizer.step()
    if step % args.save_every == 0:
        if writer is not None:  # serialized here: a copy of the state as it is now
            buffer = io.BytesIO()
            torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step}, buffer)
            queue.put((buffer.getvalue(), args.out / f"step_{step}" / "state.pt"))
        pending = f"step_{step}"
        dist.barrier()
if "never-closed" not in args.bug:
    commit()
    if writer is not None:
        queue.put(EXIT)
        writer.join()
dist.destroy_process_group()
