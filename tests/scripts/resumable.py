"""Plain DDP over gloo that resumes by its own logic, as a user writes it for torchrun.

Rank 0 `torch.save`s model, optimizer (SGD with momentum) and step every K
steps, then the model alone at the end; started again on a directory that
holds a checkpoint, the script resumes from the newest complete one. The
data of step s is a function of s and the rank, so a resume replays it.

    resumable.py OUT [--steps N] [--save-every K] [--staging] [--rng-files]
                     [--keep-last N] [--overwrite] [--seed S] [--init-from WHAT]
                     [--bug BUG ...]

Without --staging each save is written in place, into step_N/state.pt,
and any step_N holding a state.pt is taken on the next start: a commit
that is not atomic (a crash while state.pt is written leaves a torn file
that the next start loads and fails on). --staging writes each save into
tmp-checkpoint-N and renames it to checkpoint-N once written (the
Trainer's way), inside ``ckpt_harness.saving(step)``, since nothing the
harness wraps sees the rename. --rng-files has every rank save its RNG
state there too (rng_R.pt: one file per rank, a sharded layout), and a
checkpoint remembers the world size and seed that wrote it: a start on one
of another run is refused on every rank. --keep-last N deletes all but the
newest N checkpoints after each commit (the Trainer's save_total_limit);
a save into a directory that holds a checkpoint replaces it whole with
--overwrite and is refused without, and the checkpoints of another run
(the world size and seed a checkpoint records) are refused without it and
trained over with it (the Trainer's overwrite_output_dir). --pg-timeout S
bounds every collective, so a rank whose peer is stuck raises instead of
waiting for good. --init-from (nanoGPT's --init_from) is auto by default:
the newest checkpoint if there is one; scratch never looks for one, and
resume takes the newest, which must be there: a script that resumes only
when told (`--resume-args '--init_from=resume'`). Bugs (--bug, repeatable), each one a real one:

* forget-optimizer: the checkpoint lacks the optimizer's state;
* from-scratch: the checkpoint is never looked for;
* rename-per-node: every node's local rank 0 renames the staging directory
  (the LLaMA-Factory multi-node "No such file" report), not rank 0 alone;
* skip-barrier: rank 0 leaves the save without the barrier after the
  rename, while its peer waits there;
* skip-final-barrier: rank 0 writes the final model and returns without
  the barrier after it, destroying its group, while its peer waits there
  (on NCCL a hang: "training finishes, then hangs writing the final model");
* rotate-by-name: --keep-last orders checkpoints by name, not number
  (accelerate 0.16: checkpoint_10 sorts before checkpoint_9);
* overwrite-in-place: --overwrite moves the new files into the existing
  directory, leaving files of the earlier run that it did not write;
* forget-optimizer-when-warm: forget-optimizer, only in a process the
  harness started warm (`launch.warm_workers`): a script whose behaviour
  depends on what was imported before it, which the harness must never
  report as the checkpointing's failure.
* seed-when-warm: in a process started warm, another seed for the model
  (not the one the checkpoint records): a run whose states a warm start
  changes, so that a cold run judged against a warm one differs from the start;
* fail-when-warm: in a process started warm, exits 1 after training.

--full-state declares the model and optimizer as its full state
(`ckpt_harness.full_state`: replicated by DDP, the same at every world
size), and --any-world-size takes a checkpoint of another world size (the
same seed) as its own: together, a script that resumes at another
--nproc-per-node. Without --any-world-size it refuses one, as above.

--save-first saves step 0 too, before it trains, on a fresh start (OLMo-core does). --dcp-state
takes the optimizer's state through DCP's `get_optimizer_state_dict`, which, on an optimizer that has none
yet, makes one optimizer step with a zero learning rate to create it (OLMo-core's save of step 0 does).
--no-marker leaves ``ckpt_harness.saving`` out, as a script that was never
told of the harness: its save is then the `torch.save` rank 0 makes, and
the routine around it (the barriers, the rename) is known as the function
the checkpoint I/O happens in.
"""

import argparse
import contextlib
import os
import re
from datetime import timedelta
import shutil
import sys
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
parser.add_argument("--rng-files", action="store_true")
parser.add_argument("--keep-last", type=int)
parser.add_argument("--overwrite", action="store_true")
parser.add_argument("--seed", type=int, default=0)
parser.add_argument("--pg-timeout", type=float, help="seconds a collective may wait (init_process_group's timeout)")
parser.add_argument("--bug", action="append", default=[], choices=(
    "forget-optimizer", "from-scratch", "rename-per-node", "skip-barrier", "rotate-by-name", "overwrite-in-place",
    "skip-final-barrier", "forget-optimizer-when-warm", "seed-when-warm", "fail-when-warm"))
parser.add_argument("--no-marker", action="store_true")
parser.add_argument("--save-first", action="store_true")
parser.add_argument("--dcp-state", action="store_true")
parser.add_argument("--full-state", action="store_true")
parser.add_argument("--any-world-size", action="store_true")
parser.add_argument("--init-from", "--init_from", choices=("auto", "scratch", "resume"), default="auto")
args = parser.parse_args()
warm = "ckpt_harness.launch.warm_workers" in sys.modules

dist.init_process_group("gloo", **({"timeout": timedelta(seconds=args.pg_timeout)} if args.pg_timeout else {}))
rank, local_rank, world = dist.get_rank(), int(os.environ["LOCAL_RANK"]), dist.get_world_size()
torch.manual_seed(args.seed + (1 if "seed-when-warm" in args.bug and warm else 0))
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
prefix = "checkpoint-" if args.staging else "step_"
ckpt_harness.observe(lambda: {"torch_rng": torch.get_rng_state()})
if args.full_state:
    ckpt_harness.full_state(lambda: {"model": model.module.state_dict(), "optimizer": optimizer.state_dict()})


def checkpoints():
    """The committed checkpoints by step."""
    return {int(m.group(1)): p for p in args.out.iterdir()
            if (m := re.fullmatch(re.escape(prefix) + r"(\d+)", p.name)) and (p / "state.pt").exists()}


def newest_checkpoint():
    found = checkpoints()
    return found[max(found)] if found else None


def rotate():
    found = checkpoints()
    order = sorted(found, key=lambda step: found[step].name if "rotate-by-name" in args.bug else step)
    for step in order[:-args.keep_last]:
        shutil.rmtree(found[step])


def commit(staging, final):
    if final.exists() and "overwrite-in-place" in args.bug:
        for path in staging.iterdir():
            os.replace(path, final / path.name)
        staging.rmdir()
        return
    if final.exists():
        shutil.rmtree(final)
    os.rename(staging, final)


def save(step):
    state = {"model": model.module.state_dict(), "step": step, "world_size": world, "seed": args.seed}
    if "forget-optimizer" not in args.bug and not ("forget-optimizer-when-warm" in args.bug and warm):
        state["optimizer"] = optimizer.state_dict()
    if not args.staging:
        if rank == 0:
            (args.out / f"step_{step}").mkdir(exist_ok=True)
            torch.save(state, args.out / f"step_{step}" / "state.pt")
        dist.barrier()
        return
    with contextlib.nullcontext() if args.no_marker else ckpt_harness.saving(step):
        staging = args.out / f"tmp-checkpoint-{step}"
        if (args.out / f"checkpoint-{step}" / "state.pt").exists() and not args.overwrite:
            # every rank sees the same directory, so all refuse alike, before writing anything
            raise FileExistsError(f"checkpoint-{step} holds a checkpoint: give --overwrite to replace it")
        if rank == 0:
            staging.mkdir(exist_ok=True)
            torch.save(state, staging / "state.pt")
        if args.dcp_state:  # inside the save, after its first file, as OLMo-core's save of step 0
            from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

            get_optimizer_state_dict(model, optimizer)  # made if there is none: one step with a zero lr
        dist.barrier()
        if args.rng_files:
            torch.save(torch.get_rng_state(), staging / f"rng_{rank}.pt")
            dist.barrier()
        if rank == 0:
            commit(staging, args.out / f"checkpoint-{step}")
            if args.keep_last:
                rotate()
        elif "rename-per-node" in args.bug and local_rank == 0:
            os.rename(staging, args.out / f"checkpoint-{step}")
        if not ("skip-barrier" in args.bug and rank == 0):
            dist.barrier()


start = 0
found = newest_checkpoint() if "from-scratch" not in args.bug and args.init_from != "scratch" else None
if found is None and args.init_from == "resume":
    raise FileNotFoundError(f"--init_from=resume: no checkpoint in {args.out}")
checkpoint = torch.load(found / "state.pt") if found is not None else None
if checkpoint is not None and (world if args.any_world_size else checkpoint["world_size"], checkpoint["seed"]) \
        != (world, args.seed):
    if not args.overwrite:
        raise SystemExit(f"{found} was written by another run (world size {checkpoint['world_size']}, seed "
                         f"{checkpoint['seed']}); this one has {world} ranks and seed {args.seed}: give --overwrite")
    checkpoint = None  # another run's: start afresh, replacing its checkpoints as this one saves
if checkpoint is not None:
    model.module.load_state_dict(checkpoint["model"])
    if "optimizer" in checkpoint:
        optimizer.load_state_dict(checkpoint["optimizer"])
    start = checkpoint["step"]
    if args.rng_files:
        torch.set_rng_state(torch.load(found / f"rng_{rank}.pt"))
if args.save_first and checkpoint is None:
    save(0)
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        save(step)
if rank == 0:
    torch.save(model.module.state_dict(), args.out / "model.pt")
if not ("skip-final-barrier" in args.bug and rank == 0):
    dist.barrier()
dist.destroy_process_group()
if "fail-when-warm" in args.bug and warm:
    raise SystemExit("fail-when-warm: this process was started warm")
