"""A trainer in torchtitan's shape, as its checkpoint manager does it:
FSDP2 (`fully_shard`) over gloo, AdamW, each save a `dcp.save` of the
model's and optimizer's distributed state dicts and the train state into
OUT/step-N, and a start that resumes from the newest step-N directory
holding DCP's `.metadata` (torchtitan's `_find_load_step`; rank 0 writes
it last, once every rank's shard is in). The data of step s is a function
of s and the rank, so a resume replays it.

    titan_train.py OUT [--steps N] [--save-every K] [--async [--cpu-staging]] [--slow-disk S]
                       [--bug newest-dir|no-wait-at-close|no-wait-for-staging ...]

--async saves as torchtitan's `async_mode = "async"` does: `dcp.async_save`
on a gloo group of its own, the previous save awaited before the next one
starts, and the last one before the process group is torn down.
--cpu-staging: stage the state to CPU in the background as torchtitan's
`async_with_pinned_mem` does (DCP's `DefaultStager`, async staging, here
without pinned or shared memory: no GPU), and wait for the staging before
the next optimizer step (torchtitan's `maybe_wait_for_staging()`): the
writer then writes the staged copy while training goes on.
--slow-disk S: each rank's shard takes S seconds more to write, as a real
checkpoint of gigabytes does (this one's few kilobytes write in
milliseconds, less than the teardown after the last step takes). Its
step folder is made before the save is handed to the writer thread: on a
loaded box that thread may not have run at all when a hard stop lands,
and a stop right after the save returned then finds no folder, where a
real checkpoint of gigabytes is always seen half-written.

newest-dir: resume from the newest step-N directory, `.metadata` or not: a
save cut short leaves a directory DCP cannot load, and the start fails.
no-wait-at-close: with --async, tear down without awaiting the last save
(torchtitan before pytorch/torchtitan#4270: `close()` stopped its helpers
but never awaited the save in flight; dlrover's flash checkpoint, #1378).
no-wait-for-staging: with --cpu-staging, step the optimizer without
waiting for the staging: the copy is taken of whatever the optimizer has
done by then (a torn snapshot when staging is slower than a step).
model-only-on-resize: resumed at another world size than the one that
saved, load the model's weights alone and train on with a fresh
optimizer (what `--no-load-optim` or a weights-only load does when a
world-size change leaves the optimizer's shards "not fitting"): the
resume looks right, and the optimizer's moments and step are gone.

The model and optimizer, unsharded, are declared as its full state
(`ckpt_harness.full_state`): DCP reshards both, so a save at N ranks
resumes at M.
"""

import argparse
import os
import re
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)
from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
from torch.distributed.fsdp import fully_shard

import ckpt_harness

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--async", dest="background", action="store_true")
parser.add_argument("--cpu-staging", action="store_true")
parser.add_argument("--slow-disk", type=float, default=0.0)
parser.add_argument("--bug", action="append", default=[],
                    choices=("newest-dir", "no-wait-at-close", "no-wait-for-staging", "model-only-on-resize"))
args = parser.parse_args()

dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8))
for layer in model:
    if isinstance(layer, torch.nn.Linear):
        fully_shard(layer)
fully_shard(model)
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
checkpoint_group = dist.new_group(backend="gloo") if args.background else None
in_flight = staging = None
stager = DefaultStager(StagingOptions(use_pinned_memory=False, use_shared_memory=False, use_async_staging=True,
                                      use_non_blocking_copy=False)) if args.cpu_staging else None


class SlowDisk(dcp.FileSystemWriter):
    def write_data(self, plan, planner):
        time.sleep(args.slow_disk)
        return super().write_data(plan, planner)


def find_load_step(folder: Path) -> int:
    """The newest step with a complete checkpoint; -1: none."""
    steps = []
    for name in os.listdir(folder) if folder.is_dir() else ():
        found = re.fullmatch(r"step-(\d+)", name)
        if found and ("newest-dir" in args.bug or (folder / name / ".metadata").is_file()):
            steps.append(int(found[1]))
    return max(steps, default=-1)


def states() -> dict:
    model_state, optimizer_state = get_state_dict(model, optimizer)
    return {"model": model_state, "optimizer": optimizer_state}


@ckpt_harness.full_state
def unsharded() -> dict:
    model_state, optimizer_state = get_state_dict(model, optimizer, options=StateDictOptions(full_state_dict=True))
    return {"model": model_state, "optimizer": optimizer_state}


def train_state(step: int) -> dict:
    return {"step": torch.tensor(step), "world_size": torch.tensor(world)}


start = find_load_step(args.out)
if start >= 0:
    where = str(args.out / f"step-{start}")
    state = {**states(), "train_state": train_state(0)}
    if "model-only-on-resize" in args.bug:
        saved = {"train_state": train_state(0)}
        dcp.load(saved, checkpoint_id=where)
        if int(saved["train_state"]["world_size"]) != world:
            del state["optimizer"]
    dcp.load(state, checkpoint_id=where)
    if "optimizer" in state:
        set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    else:
        set_model_state_dict(model, state["model"])
    assert int(state["train_state"]["step"]) == start
for step in range(max(start, 0) + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    if staging is not None and "no-wait-for-staging" not in args.bug:
        staging.result()  # torchtitan's maybe_wait_for_staging(): the copy is taken before the state moves on
    staging = None
    optimizer.step()
    if step % args.save_every == 0:
        state = {**states(), "train_state": train_state(step)}
        if not args.background:
            dcp.save(state, checkpoint_id=str(args.out / f"step-{step}"))
            continue
        if in_flight is not None:
            in_flight.result()
        writer = None
        if args.slow_disk:
            (args.out / f"step-{step}").mkdir(parents=True, exist_ok=True)
            writer = SlowDisk(args.out / f"step-{step}")
        in_flight = dcp.async_save(state, checkpoint_id=str(args.out / f"step-{step}"), storage_writer=writer,
                                   process_group=checkpoint_group, async_stager=stager)
        if stager is not None:
            in_flight, staging = in_flight.upload_completion, in_flight.staging_completion
if in_flight is not None and "no-wait-at-close" not in args.bug:
    in_flight.result()
if stager is not None:
    stager.close()
dist.barrier()
dist.destroy_process_group()
