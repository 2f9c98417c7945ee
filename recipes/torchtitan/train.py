"""A tiny torchtitan 0.3.0 pretraining run, through torchtitan's own trainer and entry point.

    torchrun --nproc-per-node 2 recipes/torchtitan/train.py CKPT_DIR [--steps 8] [--save-interval 2] ...

torchtitan is launched as its docs launch it, `torchrun ... -m torchtitan.train
--module M --config F [--section.key value ...]`: `F` is a function of a
config registry module `M` returning a `Trainer.Config`, and the dotted flags
override its fields. Here `M` is this file (`--module train`) and `F` is
`tiny()` below: torchtitan's own llama3 `debugmodel` config (6.2M
parameters, built from the config, random weights) at sequence length 128,
local batch 2, with FSDP over the ranks and its `CheckpointManager` on. This
script's flags are turned into torchtitan's dotted flags, and
`torchtitan.train.main()` runs with them; anything after `--` is handed to
torchtitan as it is (`-- --checkpoint.async_mode async`, say).

CKPT_DIR is `--checkpoint.folder` (absolute, so not under `--dump_folder`):
saves are DCP directories `CKPT_DIR/step-N/` (`__{rank}_0.distcp`, `.metadata`)
holding the model, optimizer, lr scheduler, data loader and train state
(step, tokens seen). Started again on a CKPT_DIR that holds a `step-N` with a
`.metadata`, torchtitan's `CheckpointManager.load()` resumes from the highest
N by itself. Everything else (the tokenizer, the text data, torchtitan's dump
folder, the datasets cache) goes under `--work-dir`, beside CKPT_DIR, made
here locally: nothing is downloaded. On a machine without a GPU, `cpu.py`
beside this file holds every adaptation; it touches no checkpoint code.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402  the CPU adaptations, all in one module beside this file

#: The name torchtitan's `--module` imports this file by (it is on sys.path, above).
MODULE = "train"
SEQ_LEN = 128
LOCAL_BATCH = 2
WORDS = 1000  # the tokenizer's words; with its 3 special tokens, within debugmodel's vocabulary of 2048


def tiny():
    """The config registry function (`--config tiny`): torchtitan's llama3 debugmodel, small."""
    from torchtitan.components.checkpoint import CheckpointManager
    from torchtitan.hf_datasets.text_datasets import HuggingFaceTextDataLoader
    from torchtitan.models.llama3.config_registry import llama3_debugmodel

    config = llama3_debugmodel()  # flex attention, torchtitan's default (cpu.py, adaptation 6)
    config.training.seq_len = SEQ_LEN
    config.training.local_batch_size = LOCAL_BATCH
    config.training.steps = 8
    # "c4_test" is torchtitan's loader of a local directory of {"text": ...} JSON lines
    # (`datasets.load_dataset(path, split="train")`); the path is --dataloader.dataset_path.
    config.dataloader = HuggingFaceTextDataLoader.Config(dataset="c4_test")
    config.parallelism.spmd_backend = cpu.SPMD_BACKEND
    config.checkpoint = CheckpointManager.Config(enable=True, interval=2, last_save_model_only=False)
    config.debug.seed = 0  # without a seed two fresh runs differ at step 1
    return config


def write_once(path: Path, data: bytes) -> None:
    """Every rank makes the same bytes; the first to link its copy into place wins, and the
    file never changes after (a rank reading it never sees it replaced)."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent.parent / f".{path.name}.{os.getpid()}.tmp"  # not in the data directory
    tmp.write_bytes(data)
    try:
        os.link(tmp, path)
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


def make_assets(work_dir: Path, seed: int) -> tuple[Path, Path]:
    """A WordLevel tokenizer (tokenizer.json, tokenizer_config.json) over WORDS made-up words,
    and a directory of text documents drawn from them: what torchtitan's `hf_assets_path` and
    `dataloader.dataset_path` read."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    words = [f"w{i}" for i in range(WORDS)]
    vocab = {token: i for i, token in enumerate(["<unk>", "<s>", "</s>", *words])}
    tokenizer = Tokenizer(WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = Whitespace()
    assets = work_dir / "tokenizer"
    write_once(assets / "tokenizer.json", tokenizer.to_str().encode())
    write_once(assets / "tokenizer_config.json", json.dumps(
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}).encode())
    rng = random.Random(seed)
    docs = (json.dumps({"text": " ".join(rng.choice(words) for _ in range(rng.randint(20, 200)))})
            for _ in range(400))
    data = work_dir / "data"
    write_once(data / "train.jsonl", ("\n".join(docs) + "\n").encode())
    return assets, data


def torchtitan_args(opts: argparse.Namespace, assets: Path, data: Path) -> list[str]:
    """This script's flags as torchtitan's own command line."""
    return ["--module", MODULE, "--config", "tiny",
            "--dump_folder", str(opts.work_dir / "outputs"),
            "--hf_assets_path", str(assets),
            "--dataloader.dataset_path", str(data),
            "--checkpoint.folder", str(opts.ckpt_dir.resolve()),
            "--checkpoint.interval", str(opts.save_interval),
            "--checkpoint.keep_latest_k", str(opts.keep_latest_k),
            "--checkpoint.async_mode", opts.async_mode,
            "--training.steps", str(opts.steps),
            "--debug.seed", str(opts.seed),
            *opts.torchtitan]


def parse_args(argv=None) -> argparse.Namespace:
    argv = sys.argv[1:] if argv is None else argv
    ours, rest = (argv[:argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter,
                                epilog="Arguments after -- go to torchtitan as they are.")
    add = p.add_argument
    add("ckpt_dir", type=Path, help="--checkpoint.folder: where checkpoints go; resumed from if it holds one")
    add("--steps", type=int, default=8, help="--training.steps")
    add("--save-interval", type=int, default=2, help="--checkpoint.interval (the last step is saved too)")
    add("--keep-latest-k", type=int, default=10,
        help="--checkpoint.keep_latest_k: keep the newest K step-N directories (0: all; torchtitan's default)")
    add("--async-mode", default="disabled", choices=["disabled", "async", "async_with_pinned_mem"],
        help="--checkpoint.async_mode (torchtitan's default)")
    add("--seed", type=int, default=0, help="--debug.seed")
    add("--work-dir", type=Path, default=None,
        help="the tokenizer, the data, torchtitan's dump folder (default: CKPT_DIR-work, beside the checkpoints)")
    opts = p.parse_args(ours)
    opts.torchtitan = rest
    if opts.work_dir is None:
        opts.work_dir = Path(str(opts.ckpt_dir.resolve()) + "-work")
    opts.work_dir = opts.work_dir.resolve()
    return opts


def main(argv=None) -> None:
    opts = parse_args(argv)
    # `datasets` caches the JSON it converts; kept in the work dir, not the home directory
    os.environ.setdefault("HF_DATASETS_CACHE", str(opts.work_dir / "hf-datasets-cache"))
    cpu.adapt()  # before torchtitan is imported: it reads the device type at import
    assets, data = make_assets(opts.work_dir, opts.seed)
    sys.modules.setdefault(MODULE, sys.modules[__name__])  # `--module train` is this module, not a second copy
    import torchtitan.train

    sys.argv = [sys.argv[0], *torchtitan_args(opts, assets, data)]
    torchtitan.train.main()


if __name__ == "__main__":
    main()
