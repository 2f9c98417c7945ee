"""A tiny `accelerate` training loop as a user writes it for torchrun:
`Accelerator()`, a model and an optimizer it prepares, `save_state` into
OUT/step_N every K steps, and `load_state` of the newest step_N when started
again on a directory that holds one. The data of step s is a function of s
and the rank, so a resume replays it.

    accelerate_train.py OUT [--steps N] [--save-every K] [--total-limit N] [--final-model]
                        [--bug forget-optimizer|barrier-in-main]

--total-limit N uses accelerate's own naming and rotation instead, as its
docs show: `ProjectConfiguration(automatic_checkpoint_naming=True,
total_limit=N)`, `save_state()` into OUT/checkpoints/checkpoint_<i>
(deleting the oldest beyond N first), and `load_state()` with no directory,
which takes the newest. The iteration that names a save is set to its step
by hand before each save: accelerate asks for that (it does not restore the
iteration on a resume), and so checkpoint_<i> is the save of step i.

--final-model saves the trained model at the end as accelerate's docs
show: `wait_for_everyone()`, then `save_model(model, OUT/final)` on every
process (it writes on the main one).

forget-optimizer: the resume loads the model's weights alone (its
model.safetensors), not `load_state`: the optimizer starts afresh.
barrier-in-main: with --final-model, the barrier and the save inside
`if accelerator.is_main_process:` (bytedance/UNO#71 and #52, "when it
save the checkpoint, it stucked"; huggingface/accelerate#2690): the main
process waits in a barrier no other process enters.
"""

import argparse
import re
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration, set_seed

parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--total-limit", type=int)
parser.add_argument("--final-model", action="store_true")
parser.add_argument("--bug", choices=("forget-optimizer", "barrier-in-main"))
args = parser.parse_args()

automatic = args.total_limit is not None
project = ProjectConfiguration(project_dir=str(args.out), automatic_checkpoint_naming=automatic,
                               total_limit=args.total_limit)
accelerator = Accelerator(cpu=True, project_config=project)
set_seed(0)  # python, numpy and torch: their states are part of the checkpoint
model = torch.nn.Linear(8, 8)
optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)

start = 0
if automatic:
    named = args.out / "checkpoints"
    saved = [int(m.group(1)) for p in (named.iterdir() if named.is_dir() else ())
             if (m := re.fullmatch(r"checkpoint_(\d+)", p.name))]
    if saved:
        accelerator.load_state()  # accelerate picks the newest itself
        start = max(saved)
elif steps := [int(m.group(1)) for p in args.out.iterdir() if (m := re.fullmatch(r"step_(\d+)", p.name))]:
    start = max(steps)
    found = args.out / f"step_{start}"
    if args.bug == "forget-optimizer":
        from safetensors.torch import load_file

        accelerator.unwrap_model(model).load_state_dict(load_file(found / "model.safetensors"))
    else:
        accelerator.load_state(found)
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + accelerator.process_index)
    optimizer.zero_grad()
    accelerator.backward(model(torch.randn(4, 8, generator=data)).square().sum())
    optimizer.step()
    if step % args.save_every == 0 and automatic:
        accelerator.project_configuration.iteration = step  # checkpoint_<step>: the iteration names the directory
        accelerator.save_state()
    elif step % args.save_every == 0:
        accelerator.save_state(args.out / f"step_{step}")


def save_final_model() -> None:
    if args.bug == "barrier-in-main":
        if accelerator.is_main_process:
            accelerator.wait_for_everyone()
            accelerator.save_model(model, args.out / "final")
        return
    accelerator.wait_for_everyone()
    accelerator.save_model(model, args.out / "final")


if args.final_model:
    save_final_model()
else:
    accelerator.wait_for_everyone()
accelerator.end_training()
