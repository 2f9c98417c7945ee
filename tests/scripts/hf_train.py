"""A tiny `transformers.Trainer` as a user writes it for torchrun: a Llama
built from a config (no download), synthetic tokens, `checkpoint-N` saves,
and `resume_from_checkpoint` when the output directory holds one.

    hf_train.py OUT [STEPS [SAVE_EVERY [from-scratch]]] [--max_steps N] [--save_steps K]
                [--save_total_limit L] [--load_best_model_at_end] [--bug rotate-by-name|forget-best]

from-scratch: the bug of never passing the checkpoint to `train()`.
--load_best_model_at_end: evaluate at every save and keep the best
checkpoint through the rotation; the metric is one whose best comes early
(the eval loss, greater taken as better, as an accuracy that peaks in the
first epochs would be), so an old checkpoint is kept besides the newest.
rotate-by-name: the Trainer's rotation (`save_total_limit`) orders its
checkpoints by name, as a string sort does: checkpoint-10 before
checkpoint-9, so it deletes the newest ones and keeps old ones.
forget-best: a resume forgets which checkpoint was the best (a callback
clears the Trainer's best metric and checkpoint as training begins, the bug
of trainers that keep them outside their saved state): the first evaluation
after the resume becomes the best, whatever came before.
"""

import argparse
import os
from pathlib import Path

import torch
import transformers.trainer_utils
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

parser = argparse.ArgumentParser()
parser.add_argument("out")
parser.add_argument("steps", nargs="?", type=int, default=4)
parser.add_argument("save_every", nargs="?", type=int, default=2)
parser.add_argument("mode", nargs="?", choices=("from-scratch",))
parser.add_argument("--max_steps", type=int)
parser.add_argument("--save_steps", type=int)
parser.add_argument("--save_total_limit", type=int)
parser.add_argument("--load_best_model_at_end", action="store_true")
parser.add_argument("--bug", choices=("rotate-by-name", "forget-best"))
cli = parser.parse_args()
out = cli.out
steps = cli.max_steps or cli.steps
save_every = cli.save_steps or cli.save_every
if cli.bug == "rotate-by-name":
    def by_name(output_dir, checkpoint_prefix="checkpoint", use_mtime=False, best_model_checkpoint=None):
        return sorted(str(p) for p in Path(output_dir).glob(f"{checkpoint_prefix}-*") if p.is_dir())
    transformers.trainer_utils.sort_checkpoints = by_name
for key, value in {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_VERBOSITY": "error", "DISABLE_TQDM": "1"}.items():
    os.environ.setdefault(key, value)


class Tokens(torch.utils.data.Dataset):
    def __init__(self, n):
        self.ids = torch.randint(0, 64, (n, 16), generator=torch.Generator().manual_seed(1))

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


torch.manual_seed(0)
model = LlamaForCausalLM(LlamaConfig(
    hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=2,
    vocab_size=64, max_position_embeddings=32, attention_dropout=0.1, attn_implementation="eager"))
args = TrainingArguments(
    output_dir=out, use_cpu=True, ddp_backend="gloo", max_steps=steps, save_strategy="steps",
    save_steps=save_every, per_device_train_batch_size=2, learning_rate=1e-2, seed=0, data_seed=0,
    report_to=[], logging_strategy="no", eval_strategy="steps" if cli.load_best_model_at_end else "no",
    disable_tqdm=True, dataloader_num_workers=0,
    ddp_find_unused_parameters=False, save_total_limit=cli.save_total_limit,
    **({"load_best_model_at_end": True, "eval_steps": save_every,
        "metric_for_best_model": "eval_loss", "greater_is_better": True, "per_device_eval_batch_size": 2}
       if cli.load_best_model_at_end else {}),
)


class ForgetBest(transformers.TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        state.best_metric = state.best_global_step = state.best_model_checkpoint = None


trainer = Trainer(model=model, args=args, train_dataset=Tokens(3 * 2 * int(os.environ["WORLD_SIZE"])),
                  eval_dataset=Tokens(2 * int(os.environ["WORLD_SIZE"])) if cli.load_best_model_at_end else None,
                  callbacks=[ForgetBest()] if cli.bug == "forget-best" else None)
last = get_last_checkpoint(out) if os.path.isdir(out) else None
trainer.train(resume_from_checkpoint=None if cli.mode == "from-scratch" else last)
