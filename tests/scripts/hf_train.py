"""A tiny `transformers.Trainer` as a user writes it for torchrun: a Llama
built from a config (no download), synthetic tokens, `checkpoint-N` saves,
and `resume_from_checkpoint` when the output directory holds one.

    hf_train.py OUT [STEPS [SAVE_EVERY [from-scratch]]]

from-scratch: the bug of never passing the checkpoint to `train()`.
"""

import os
import sys

import torch
from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments
from transformers.trainer_utils import get_last_checkpoint

out = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 4
save_every = int(sys.argv[3]) if len(sys.argv) > 3 else 2
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
    report_to=[], logging_strategy="no", eval_strategy="no", disable_tqdm=True, dataloader_num_workers=0,
    ddp_find_unused_parameters=False,
)
trainer = Trainer(model=model, args=args, train_dataset=Tokens(3 * 2 * int(os.environ["WORLD_SIZE"])))
from_scratch = sys.argv[4:] == ["from-scratch"]
trainer.train(resume_from_checkpoint=None if from_scratch else get_last_checkpoint(out))
