"""A tiny LLaMA-Factory 0.9.5 pretraining run, through LLaMA-Factory's own training entry.

    torchrun --nproc-per-node 2 recipes/llamafactory/train.py CKPT_DIR [--steps 8] [--save-steps 2] [-- KEY=VALUE]

`llamafactory-cli train train.yaml [KEY=VALUE ...]` launches, on more than
one process, `torchrun ... llamafactory/launcher.py train.yaml [KEY=VALUE
...]`, whose `__main__` calls `llamafactory.train.tuner.run_exp()`: it reads
the YAML named by `sys.argv[1]` and the OmegaConf `KEY=VALUE` overrides
after it. This script is that launcher with the user's side in front: it
writes the assets a user would have (a tiny Llama built from a
`LlamaConfig`, random weights, seed 0; a local WordLevel tokenizer; a text
dataset and its `dataset_info.json`) and the `train.yaml` a user would
write, then calls `run_exp()` with `sys.argv` set as the launcher's would
be. Anything after `--` is handed on as an override (`-- save_only_model=true`).

CKPT_DIR is `output_dir`: the HF Trainer saves `CKPT_DIR/checkpoint-N/`
(`model.safetensors`, `optimizer.pt`, `scheduler.pt`, `rng_state_{rank}.pth`,
`trainer_state.json`, the tokenizer) every `--save-steps` steps, and the final
model into CKPT_DIR at the end. Started again on a CKPT_DIR that holds a
`checkpoint-N`, LLaMA-Factory resumes from the last one by itself
(`hparams/parser.py`: `get_last_checkpoint(output_dir)`, "Resuming training
from ..."). The assets, the YAML and the datasets cache go under
`--work-dir`, beside CKPT_DIR; nothing is downloaded. On a machine without a
GPU, `cpu.py` beside this file holds every adaptation; it touches no
checkpoint code, and there the resume dies in the HF Trainer (README.md).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402  the CPU adaptations, all in one module beside this file

WORDS = 400  # the tokenizer's words, besides its 4 special tokens
DATASET = "tiny_pt"


def publish(final: Path, build) -> None:
    """Make `final` (a directory) with `build(tmp)` in a directory of this process's own, then rename
    it into place: every rank builds the same bytes, the first rename wins, and a reader never sees
    a half-written `final` (renaming onto a non-empty directory fails, and the loser's copy is dropped)."""
    if final.exists():
        return
    tmp = final.parent / f".{final.name}.{os.getpid()}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    build(tmp)
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def write_model(out: Path, seed: int) -> None:
    """A tiny Llama from a `LlamaConfig` (2 layers, hidden 64, ~0.2M parameters), random weights from
    `seed`, and a WordLevel tokenizer over made-up words, saved as a user's local model directory."""
    import torch
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["<unk>", "<s>", "</s>", "<pad>"]
    vocab = {token: i for i, token in enumerate([*specials, *(f"w{i}" for i in range(WORDS))])}
    backend = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    backend.pre_tokenizer = Whitespace()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="<unk>", bos_token="<s>",
                                        eos_token="</s>", pad_token="<pad>")
    tokenizer.save_pretrained(out)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                         bos_token_id=1, eos_token_id=2, pad_token_id=3, tie_word_embeddings=False)
    torch.manual_seed(seed)
    LlamaForCausalLM(config).save_pretrained(out)


def write_data(out: Path, seed: int) -> None:
    """A pretraining dataset of `{"text": ...}` records over the tokenizer's words, and the
    `dataset_info.json` that names it for LLaMA-Factory's `dataset:` setting."""
    rng = random.Random(seed)
    texts = [{"text": " ".join(f"w{rng.randrange(WORDS)}" for _ in range(rng.randint(20, 120)))}
             for _ in range(200)]
    (out / f"{DATASET}.json").write_text(json.dumps(texts))
    (out / "dataset_info.json").write_text(json.dumps(
        {DATASET: {"file_name": f"{DATASET}.json", "columns": {"prompt": "text"}}}, indent=2))


def yaml_text(opts: argparse.Namespace, model: Path, data: Path) -> str:
    """The train.yaml a user writes (LLaMA-Factory's examples/train_full/*.yaml, cut down). Nothing in
    it is for the CPU: with no GPU, accelerate and transformers pick the CPU and gloo by themselves."""
    limit = "null" if opts.save_total_limit is None else opts.save_total_limit
    return f"""\
### model
model_name_or_path: {model}

### method
stage: pt
do_train: true
finetuning_type: full

### dataset
dataset: {DATASET}
dataset_dir: {data}
cutoff_len: 64
dataloader_num_workers: 0

### output
output_dir: {opts.ckpt_dir}
logging_steps: 1
save_steps: {opts.save_steps}
save_only_model: false
save_total_limit: {limit}
plot_loss: false
report_to: none

### train
per_device_train_batch_size: 2
gradient_accumulation_steps: 1
learning_rate: 1.0e-3
max_steps: {opts.steps}
lr_scheduler_type: cosine
warmup_steps: 1
seed: {opts.seed}
"""


def parse_args(argv=None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog="KEY=VALUE arguments after -- go to LLaMA-Factory as overrides of train.yaml.")
    add = p.add_argument
    add("ckpt_dir", type=Path, help="output_dir: checkpoint-N/ go here; resumed from if it holds one")
    add("--steps", type=int, default=8, help="max_steps")
    add("--save-steps", type=int, default=2, help="save_steps: a checkpoint-N every N steps")
    add("--save-total-limit", type=int, default=None, help="save_total_limit: keep the newest N (default: all)")
    add("--seed", type=int, default=42, help="seed (the Trainer's; the model's weights are seed 0)")
    add("--work-dir", type=Path, default=None,
        help="the model, tokenizer, data, train.yaml, datasets cache (default: CKPT_DIR-work, beside it)")
    opts = p.parse_args(ours)
    opts.overrides = rest
    opts.ckpt_dir = opts.ckpt_dir.resolve()
    opts.work_dir = (opts.work_dir or Path(str(opts.ckpt_dir) + "-work")).resolve()
    return opts


def main(argv=None) -> None:
    opts = parse_args(argv)
    # `datasets` caches the JSON it converts and the tokenized blocks; kept in the work dir
    os.environ.setdefault("HF_DATASETS_CACHE", str(opts.work_dir / "hf-datasets-cache"))
    cpu.adapt()  # before llamafactory is imported: mm_plugin imports torchaudio at module level
    opts.work_dir.mkdir(parents=True, exist_ok=True)
    model, data = opts.work_dir / "model", opts.work_dir / "data"
    publish(model, lambda tmp: write_model(tmp, 0))
    publish(data, lambda tmp: write_data(tmp, 0))
    config = opts.work_dir / "train.yaml"
    tmp = opts.work_dir / f".train.yaml.{os.getpid()}.tmp"
    tmp.write_text(yaml_text(opts, model, data))
    os.replace(tmp, config)  # every rank writes the same text; the rename keeps a reader off a half-written file
    from llamafactory.train.tuner import run_exp

    sys.argv = [sys.argv[0], str(config), *opts.overrides]  # as torchrun hands llamafactory/launcher.py
    run_exp()


if __name__ == "__main__":
    main()
