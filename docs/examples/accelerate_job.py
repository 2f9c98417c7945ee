"""A user's job on accelerate's own checkpointing, written as its docs show:
`ProjectConfiguration(automatic_checkpoint_naming=True, total_limit=N)` and
`save_state()` each save, `load_state()` of the newest `checkpoint_<i>` on a
resume. What the catalogue finds in accelerate 0.16.0 with it is in
docs/findings.md ("Older releases the catalogue catches")."""

import re
from pathlib import Path

from accelerate import Accelerator
from accelerate.utils import ProjectConfiguration

from ckpt_harness.jobs._common import TinyJob, build_mlp, restore_rng, saved_rng


class Progress:
    """The step, data position, schedule and RNG, saved by accelerate as a
    custom object: accelerate 0.16 does not take torch 2's `LRScheduler` for a
    scheduler (it checks `_LRScheduler`), and restores its own RNG file
    before the custom objects, which then win."""

    def __init__(self, job):
        self.job = job

    def state_dict(self):
        return {"step": self.job.step, "data": self.job.stream.state_dict(),
                "scheduler": self.job.scheduler.state_dict(), "rng": saved_rng()}

    def load_state_dict(self, state):
        self.job.step = state["step"]
        self.job.stream.load_state_dict(state["data"])
        self.job.scheduler.load_state_dict(state["scheduler"])
        restore_rng(state["rng"])


class AccelerateJob(TinyJob):
    def setup(self, ctx):
        config = ProjectConfiguration(project_dir=str(ctx.ckpt_dir), automatic_checkpoint_naming=True,
                                      total_limit=ctx.keep_last)
        self.acc = Accelerator(cpu=True, project_config=config)
        model = build_mlp(ctx.seed)
        self._build_common(ctx, model, model.parameters())
        self.wrapped = (*self.acc.prepare(self.model, self.optimizer), self.scheduler)
        self.acc.register_for_checkpointing(Progress(self))

    def _named_params(self):
        return self.model.named_parameters()

    def train_step(self, ctx, step):
        import torch.nn as nn

        model, optimizer, scheduler = self.wrapped
        x, y = self.stream.next_batch()
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        self.acc.backward(loss)
        optimizer.step()
        scheduler.step()
        self.step = step
        return loss.item()

    def save(self, ctx, step):
        self.acc.save_state()

    def load(self, ctx):
        root = Path(ctx.ckpt_dir) / "checkpoints"
        found = sorted((int(m.group(1)), p) for p in (root.iterdir() if root.is_dir() else ())
                       if (m := re.fullmatch(r"checkpoint_(\d+)", p.name)))
        if not found:
            return None
        iteration, path = found[-1]
        self.acc.load_state(str(path))
        self.acc.project_configuration.iteration = iteration + 1
        return self.step
