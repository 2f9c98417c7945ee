"""A tiny OLMo-core pretraining run, written the way OLMo-core's docs and
`src/examples/llm/train.py` train: configs for the model, data, train module
and trainer, built in `train()`, then `Trainer.fit()` under torchrun.

    torchrun --nproc-per-node 2 recipes/olmo_core/train.py CKPT_DIR [--save-interval 2] [--save-overwrite] ...

CKPT_DIR is the trainer's `save_folder`. Started again on a directory that
holds a checkpoint, the trainer resumes from the newest complete `stepN` in it
by its own logic (`TrainerConfig.load_strategy`, default `if_available`);
`--load-path` is OLMo-core's "load from here if the save folder holds none".
Everything is made locally: a ~30k-parameter Llama-like model from a config,
a token file of random ids written under `--work-dir`; nothing is downloaded.
The checkpoint settings a user sets are flags, each with OLMo-core's own
default unless said otherwise. On a machine without a GPU, `cpu.py` beside
this file is the only change (gloo instead of NCCL); it touches no
checkpoint code.
"""

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import numpy as np

from olmo_core.data import NumpyDataLoaderConfig, NumpyFSLDatasetConfig, TokenizerConfig
from olmo_core.distributed.parallel import DataParallelType
from olmo_core.nn.transformer import TransformerConfig
from olmo_core.optim import AdamWConfig
from olmo_core.train import (
    Duration,
    LoadStrategy,
    TrainerConfig,
    prepare_training_environment,
    teardown_training_environment,
)
from olmo_core.train.callbacks import CheckpointerCallback
from olmo_core.train.train_module import TransformerDataParallelConfig, TransformerTrainModuleConfig
from olmo_core.utils import seed_all

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cpu  # noqa: E402  the CPU adaptations, all in one module beside this file

log = logging.getLogger(__name__)

VOCAB = 256
SEQ_LEN = 32


def make_tokens(work_dir: Path, n_tokens: int, seed: int) -> str:
    """The training data: `n_tokens` random token ids as a uint16 memmap, the
    format OLMo-core's numpy datasets read. Every rank writes the same bytes
    to a file of its own and renames it into place, so the file is whole
    whichever rank renames last."""
    path = work_dir / f"tokens-{seed}.npy"
    if not path.exists():
        work_dir.mkdir(parents=True, exist_ok=True)
        tokens = np.random.default_rng(seed).integers(1, VOCAB, size=n_tokens, dtype=np.uint16)
        tmp = work_dir / f"{path.name}.{os.getpid()}.tmp"
        mm = np.memmap(tmp, dtype=np.uint16, mode="w+", shape=(n_tokens,))
        mm[:] = tokens
        mm.flush()
        del mm
        os.replace(tmp, path)
    return str(path)


def build(opts) -> tuple:
    tokenizer = TokenizerConfig(vocab_size=VOCAB, eos_token_id=0, pad_token_id=0)
    model_config = TransformerConfig.llama_like(
        d_model=32, vocab_size=VOCAB, n_layers=2, n_heads=2, hidden_size_multiple_of=32,
    )
    data_path = make_tokens(opts.work_dir, n_tokens=64 * 1024, seed=opts.data_seed)
    dataset_config = NumpyFSLDatasetConfig(
        paths=[data_path], sequence_length=SEQ_LEN, tokenizer=tokenizer, work_dir=str(opts.work_dir / "dataset"),
    )
    data_loader_config = NumpyDataLoaderConfig(
        global_batch_size=4 * SEQ_LEN,  # in tokens: 4 instances, 2 per rank at 2 ranks
        seed=opts.data_seed, num_workers=0, work_dir=str(opts.work_dir / "data_loader"),
    )
    train_module_config = TransformerTrainModuleConfig(
        rank_microbatch_size=2 * SEQ_LEN,  # in tokens
        max_sequence_length=SEQ_LEN,
        optim=AdamWConfig(lr=1e-3),
        dp_config=TransformerDataParallelConfig(name=DataParallelType.ddp),
        max_grad_norm=1.0,
    )
    trainer_config = TrainerConfig(
        save_folder=opts.save_folder,
        save_overwrite=opts.save_overwrite,
        load_path=opts.load_path,
        load_strategy=LoadStrategy(opts.load_strategy),
        work_dir=str(opts.work_dir / "trainer"),
        max_duration=Duration.steps(opts.steps),
        metrics_collect_interval=1,
        cancel_check_interval=1,
    ).with_callback(
        "checkpointer",
        CheckpointerCallback(
            save_interval=opts.save_interval,
            ephemeral_save_interval=opts.ephemeral_save_interval,
            max_checkpoints=opts.max_checkpoints,
            save_async=opts.save_async,
        ),
    )
    return model_config, dataset_config, data_loader_config, train_module_config, trainer_config


def train(opts) -> None:
    model_config, dataset_config, data_loader_config, train_module_config, trainer_config = build(opts)
    seed_all(opts.init_seed)
    model = model_config.build(init_device="meta")
    train_module = train_module_config.build(model)
    dataset = dataset_config.build()
    data_loader = data_loader_config.build(dataset, dp_process_group=train_module.dp_process_group)
    trainer = trainer_config.build(train_module, data_loader)
    # With load_strategy if_available the trainer loads the newest checkpoint
    # in save_folder itself, or else load_path (its own logic, in fit()).
    trainer.fit()


def optional_int(value: str) -> Optional[int]:
    return None if value.lower() in ("none", "") else int(value)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    add = p.add_argument
    add("save_folder", help="where checkpoints go (TrainerConfig.save_folder); resumed from if it holds one")
    add("--steps", type=int, default=8, help="train this many steps (TrainerConfig.max_duration)")
    add("--save-interval", type=int, default=2,
        help="CheckpointerCallback.save_interval: a permanent checkpoint every N steps")
    add("--ephemeral-save-interval", type=optional_int, default=None,
        help="CheckpointerCallback.ephemeral_save_interval: a checkpoint every N steps, removed when the next is saved")
    add("--max-checkpoints", type=optional_int, default=3,
        help="CheckpointerCallback.max_checkpoints: keep the newest N permanent checkpoints ('none': all)")
    add("--save-overwrite", action=argparse.BooleanOptionalAction, default=False,
        help="TrainerConfig.save_overwrite: clear a step directory that already exists before saving into it "
             "(OLMo-core's default False refuses with FileExistsError; its example train.py sets True)")
    add("--save-async", action=argparse.BooleanOptionalAction, default=False,
        help="CheckpointerCallback.save_async. OLMo-core's default (None) is async wherever the backend takes "
             "CPU tensors, gloo included; on 2 gloo ranks the async save of the last step never returned "
             "(README.md), so the recipe saves synchronously unless told")
    add("--load-path", default=None,
        help="TrainerConfig.load_path: load from here when save_folder holds no checkpoint")
    add("--load-strategy", default="if_available", choices=[s.value for s in LoadStrategy],
        help="TrainerConfig.load_strategy")
    add("--work-dir", type=Path, default=None,
        help="the data and the trainer's work files (default: SAVE_FOLDER-work, beside the checkpoints, not in them)")
    add("--init-seed", type=int, default=12536, help="seed of the model's initial weights")
    add("--data-seed", type=int, default=0, help="seed of the token file and the data loader's order")
    opts = p.parse_args(argv)
    if opts.work_dir is None:
        opts.work_dir = Path(str(Path(opts.save_folder)).rstrip("/") + "-work")
    return opts


def main(argv=None) -> None:
    opts = parse_args(argv)
    prepare_training_environment(backend=cpu.BACKEND)
    try:
        train(opts)
    finally:
        teardown_training_environment()


if __name__ == "__main__":
    main()
