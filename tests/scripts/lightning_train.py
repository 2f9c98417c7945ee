"""A tiny PyTorch Lightning training script as a user writes it for torchrun:
a `LightningModule`, `Trainer(strategy="ddp")` on the CPU (Lightning reads
torchrun's environment itself), a `ModelCheckpoint` callback writing
OUT/step_N.ckpt at the end of every epoch of K steps and keeping them all,
and `trainer.fit(..., ckpt_path=...)` on the newest one when started again on
a directory that holds one. The batches of an epoch are the same in every
epoch and every run (no shuffling, no dropout), so a resume replays them.

    lightning_train.py OUT_OR_URL [--steps N] [--save-every K] [--async] [--keep-best]
                      [--bug weights-only|max-steps|resume-kept]

--async saves through Lightning's `AsyncCheckpointIO` (its plugin, the
docs' way): `save_checkpoint` clones every tensor of the checkpoint on the
calling thread and hands the write to a one-thread pool, keeping no future;
the pool writes through fsspec's local transaction (a temporary file in the
system's temp directory, moved into OUT), and `Trainer.fit` waits for it as
it tears down.

The run is N/K epochs (`max_epochs`). Two twins, each a resume that is not
the uninterrupted run:

weights-only: the resume takes the model's weights from the checkpoint
(`LitModel.load_from_checkpoint`, the snippet users copy to "continue
training") and calls `fit` without `ckpt_path`: the optimizer, the step
counter and the loops start afresh.

max-steps: the run stops at `max_steps=N` instead, the same N steps and the
same checkpoints. Lightning treats a restart of iteration-based training as
one inside an epoch (`FitLoop.restarting`), so the resume re-enters the
epoch its checkpoint had finished, on a fresh DataLoader: the next epochs
see other batches than the uninterrupted run's.

--keep-best keeps the two checkpoints of the lowest logged loss
(``ModelCheckpoint(monitor="loss", save_top_k=2, save_last=True)``), plus
``last.ckpt``, and resumes with ``fit(ckpt_path="last")``, the docs' way:
the checkpoint then holds the run's own paths (``dirpath``,
``best_model_path``, ``best_k_models`` keyed by path, ``last_model_path``).
Its twin resume-kept resumes the first ``step_*.ckpt`` it lists instead:
the older of the two kept (the loss falls), not the last.

OUT may be a URL (``s3://bucket/prefix``): Lightning writes its checkpoints
through fsspec, and the script finds the newest one there the same way.
"""

import argparse
import datetime
import os
import re

import fsspec
import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint
from pytorch_lightning.plugins.io import AsyncCheckpointIO
from pytorch_lightning.strategies import DDPStrategy

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--async", dest="background", action="store_true")
parser.add_argument("--keep-best", dest="monitor", action="store_true")
parser.add_argument("--bug", choices=("weights-only", "max-steps", "resume-kept"))
args = parser.parse_args()


class LitModel(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.layer = torch.nn.Linear(8, 8)

    def training_step(self, batch, batch_idx):
        (x,) = batch
        loss = self.layer(x).square().sum()
        if args.monitor:
            self.log("loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=0.1)


# One epoch is save-every batches per rank; Lightning's DistributedSampler
# (shuffle off) gives each rank its own.
world = int(os.environ.get("WORLD_SIZE", "1"))
data = torch.randn(4 * args.save_every * world, 8, generator=torch.Generator().manual_seed(0))
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(data), batch_size=4, shuffle=False)

pl.seed_everything(0, verbose=False)
model = LitModel()
trainer = pl.Trainer(
    accelerator="cpu", devices=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    num_nodes=world // int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
    strategy=DDPStrategy(process_group_backend="gloo", timeout=datetime.timedelta(seconds=60)),
    **({"max_steps": args.steps} if args.bug == "max-steps" else {"max_epochs": args.steps // args.save_every}),
    callbacks=[ModelCheckpoint(dirpath=args.out, filename="step_{step}", auto_insert_metric_name=False,
                               every_n_epochs=1, save_on_train_epoch_end=True,
                               **({"monitor": "loss", "save_top_k": 2, "save_last": True}
                                  if args.monitor else {"save_top_k": -1}))],
    logger=False, enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
    plugins=[AsyncCheckpointIO()] if args.background else None,
)
fs, root = fsspec.url_to_fs(args.out)
names = [p.rsplit("/", 1)[-1] for p in fs.ls(root, detail=False)] if fs.exists(root) else []
steps = [int(m.group(1)) for name in names if (m := re.fullmatch(r"step_(\d+)\.ckpt", name))]
newest = f"{args.out}/step_{max(steps)}.ckpt" if steps else None
if newest is not None and args.bug == "resume-kept":
    newest = f"{args.out}/step_{min(steps)}.ckpt"
if newest is not None and args.bug == "weights-only":
    model, newest = LitModel.load_from_checkpoint(newest), None
if newest is not None and args.monitor and args.bug != "resume-kept":
    newest = "last"
trainer.fit(model, loader, ckpt_path=newest)
