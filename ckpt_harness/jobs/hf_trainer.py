"""HF `transformers.Trainer`, a framework that owns its loop, on gloo.

A tiny Llama causal LM built from a config (no download), a synthetic token
dataset generated from the seed, and the Trainer's own checkpointing and
resume: `checkpoint-N` directories under `ctx.ckpt_dir`, discovered with
`transformers.trainer_utils.get_last_checkpoint`, rotated by
`save_total_limit`.

Layout the Trainer writes (transformers 5.x, DDP on CPU):

    checkpoint-4/model.safetensors, config.json,   rank 0 (`save_model`)
                 generation_config.json
    checkpoint-4/optimizer.pt, scheduler.pt        rank 0
    checkpoint-4/rng_state_{r}.pth                 rank r
    checkpoint-4/trainer_state.json                rank 0, last; then rotation

There is no commit step: `get_last_checkpoint` picks the highest
`checkpoint-N` directory that exists, whatever it holds, and no rank waits for
the others before reporting the save done.

How the job reports to the harness (callbacks of the live Trainer):

- `ctx.saved(step)` in `on_save`, which `_maybe_log_save_evaluate` calls right
  after `_save_checkpoint` returned, i.e. after this rank's files (including
  its RNG file) are written and, on rank 0, after rotation.
- `ctx.loaded(None)` before `train()` on a fresh start. After a resume,
  `ctx.loaded(k)` once the Trainer has restored everything it restores: the
  RNG states come back last, inside the epoch loop (after the first batch of
  a mid-epoch resume is fetched, at the top of the epoch on a boundary), so
  the report follows `Trainer._load_rng_state`; if that never runs (nothing
  left to train) it comes from `on_train_end`.
- Probe phases (`setup`, `load`, `train_step k`, `save k`) are set from the
  callbacks so that `explore` finds the operations of each save: an owned
  loop otherwise runs entirely in the runner's single `run` phase.

Dropout is on (`attention_dropout`), so a resume that loses the torch RNG
changes the numbers.
"""

from __future__ import annotations

import importlib.util
import os
import random
from typing import Any, Mapping, Optional

from ckpt_harness import phase
from ckpt_harness.job import Job, RankContext

VOCAB, SEQ_LEN = 64, 16
BATCH_SIZE = 2  # per device
ATTENTION_DROPOUT = 0.1
LEARNING_RATE = 1e-2
WARMUP_STEPS = 2


def _build_model(seed: int):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=32,
        attention_dropout=ATTENTION_DROPOUT, attn_implementation="eager",
    )
    # Weights from `seed` alone, in a forked RNG: every rank builds the same
    # replica and the global streams stay where the harness seeded them.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return LlamaForCausalLM(config)


def _axis_arguments(ctx: RankContext) -> dict[str, Any]:
    """The Trainer's arguments for `ctx.axes` (`HFTrainerJob.axes`)."""
    axes = ctx.axes
    workers = axes.data == "workers"
    return {
        "bf16": axes.precision == "bf16",
        "fp16": axes.precision == "fp16",
        "optim": {"adamw": "adamw_torch", "sgd": "sgd", "adagrad": "adagrad"}[axes.optimizer],
        **({"optim_args": "momentum=0.9"} if axes.optimizer == "sgd" else {}),
        "dataloader_num_workers": 2 if workers else 0,
        "dataloader_persistent_workers": workers,
        **({"torch_compile": True, "torch_compile_backend": "aot_eager"} if axes.compile else {}),
    }


class _Tokens:
    """A synthetic causal-LM dataset, a pure function of the seed."""

    def __init__(self, seed: int, n: int) -> None:
        import torch

        g = torch.Generator().manual_seed(seed * 7919 + 1)
        self.ids = torch.randint(0, VOCAB, (n, SEQ_LEN), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, Any]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _make_callback(job: "HFTrainerJob", ctx: RankContext):
    from transformers import TrainerCallback

    class _Report(TrainerCallback):
        """Tells the harness when the Trainer has resumed and when a save returned."""

        def __init__(self) -> None:
            self.pending_load: Optional[int] = None

        def on_train_begin(self, args, state, control, **kwargs):
            if job.resumed_from is not None:
                if state.global_step != job.resumed_from:
                    raise RuntimeError(
                        f"Trainer resumed at global_step {state.global_step}, "
                        f"not at checkpoint-{job.resumed_from}"
                    )
                self.pending_load = state.global_step

        def on_step_begin(self, args, state, control, **kwargs):
            self.report_load()  # only if the RNG hook did not fire (another transformers)
            ctx.phase(phase.train_step(state.global_step + 1))

        def on_step_end(self, args, state, control, **kwargs):
            # Runs after DefaultFlowCallback decided; `_save_checkpoint` follows.
            if control.should_save:
                ctx.phase(phase.save(state.global_step))

        def on_train_end(self, args, state, control, **kwargs):
            self.report_load()  # nothing left to train: the Trainer never restored the RNG

        def on_save(self, args, state, control, **kwargs):
            ctx.saved(state.global_step)

        def report_load(self) -> None:
            if self.pending_load is not None:
                step, self.pending_load = self.pending_load, None
                ctx.loaded(step)

    return _Report()


def _report_after_rng_restore(trainer, report) -> None:
    """Report the load the moment the Trainer restores the RNG states.

    That is the last piece of a resume, and it happens inside the epoch loop
    where no callback event marks it: on an epoch boundary it is followed by
    `iter(dataloader)`, which draws a base seed from the global torch RNG,
    before `on_step_begin`. Wrapping this one method of the live trainer is
    the only way to observe the resumed state before the next step consumes
    any of it."""
    restore = trainer._load_rng_state

    def restore_then_report(checkpoint):
        restore(checkpoint)
        if checkpoint is not None:
            report.report_load()

    trainer._load_rng_state = restore_then_report


#: Set in the warm parent (through `HFTrainerJob.env`) so that importing this
#: module there, as a preload, also fills caches every rank would otherwise
#: fill on its first save; never set in the harness process itself.
WARM_ENV = "CKPT_HARNESS_HF_TRAINER_WARM"


def _warm_caches() -> None:
    """Pure-Python caches the Trainer fills on first use (no torch op, no
    thread, so safe before fork): `save_pretrained` compiles ~900 regexes of
    transformers' checkpoint conversion table (~0.7 s per process)."""
    from transformers import conversion_mapping

    conversion_mapping.get_checkpoint_conversion_mapping("llama")


def _optional(*modules: str) -> tuple[str, ...]:
    """Modules to preload only if installed. accelerate imports deepspeed
    whenever it is installed (`extract_model_from_parallel`), ~2.5 s per rank."""
    return tuple(m for m in modules if importlib.util.find_spec(m) is not None)


class HFTrainerJob(Job):
    """`transformers.Trainer` (DDP over the harness's gloo group) with its own
    `checkpoint-N` saves and `get_last_checkpoint` resume."""

    requires = {m: "ckpt-harness[hf]" for m in ("transformers", "accelerate", "safetensors")}
    preload = (
        "numpy", "torch", "torch.distributed", "torch.nn.parallel", "torch._dynamo",
        "safetensors", "safetensors.torch",
        "accelerate", "accelerate.state", "accelerate.data_loader",
        "transformers", "transformers.trainer", "transformers.training_args",
        "transformers.trainer_callback", "transformers.trainer_utils",
        "transformers.models.llama.modeling_llama", "transformers.conversion_mapping",
        *_optional("deepspeed"),
        __name__,  # last: with WARM_ENV set, fills the caches of `_warm_caches`
    )
    env = {
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        # accelerate's MULTI_CPU state otherwise calls torch.set_num_threads
        # (physical cores / local world size), overriding the harness's 1.
        "OMP_NUM_THREADS": "1",
        "TRANSFORMERS_VERBOSITY": "error",
        "DISABLE_TQDM": "1",
        # If deepspeed is installed (accelerate then imports it): no accelerator probing.
        "DS_ACCELERATOR": "cpu",
        WARM_ENV: "1",
    }

    #: Optimizer steps per epoch (the dataset has this many batches per rank).
    #: 3 with saves every 2 steps: resumes land mid-epoch and the run crosses
    #: an epoch boundary; a multiple of `save_every` makes every resume land
    #: on an epoch boundary instead.
    steps_per_epoch: int = 3
    checkpoint_layout = "hf_trainer"

    trainer: Any = None
    resumed_from: Optional[int] = None
    #: The Trainer's own switches: `bf16`/`fp16` (its autocast and, for fp16,
    #: accelerate's GradScaler), `optim`, `dataloader_num_workers` with
    #: persistent workers, `torch_compile`. Its data is always its default
    #: shuffled sampler, resumed by skipping batches (data=stream).
    axes = {"precision": ("fp32", "bf16", "fp16"), "optimizer": ("adamw", "sgd", "adagrad"),
            "data": ("stream", "workers"), "compile": (False, True)}

    def run(self, ctx: RankContext) -> None:
        import torch.distributed as dist
        from transformers import Trainer, TrainingArguments
        from transformers.trainer_utils import get_last_checkpoint

        if not dist.is_initialized():
            raise RuntimeError("HFTrainerJob expects the harness's initialised process group")
        # accelerate's PartialState sees WORLD_SIZE > 1 with use_cpu, picks
        # MULTI_CPU/gloo and, finding the default group initialised, reuses it
        # (it only fills MASTER_PORT in the environment if unset; no socket).
        os.environ.setdefault("LOCAL_RANK", str(ctx.local_rank))

        args = TrainingArguments(
            output_dir=str(ctx.ckpt_dir),
            use_cpu=True,
            ddp_backend="gloo",
            max_steps=ctx.total_steps,
            save_strategy="steps",
            save_steps=ctx.save_every,
            save_total_limit=ctx.keep_last,
            per_device_train_batch_size=BATCH_SIZE,
            learning_rate=LEARNING_RATE,
            lr_scheduler_type="linear",
            warmup_steps=WARMUP_STEPS,
            weight_decay=0.01,
            seed=ctx.seed,
            data_seed=ctx.seed,
            **_axis_arguments(ctx),
            report_to=[],
            logging_strategy="no",
            eval_strategy="no",
            disable_tqdm=True,
            ddp_find_unused_parameters=False,
        )
        dataset = _Tokens(ctx.seed, self.steps_per_epoch * BATCH_SIZE * ctx.world_size)
        ctx.phase(phase.SETUP)
        report = _make_callback(self, ctx)
        self.trainer = Trainer(
            model=_build_model(ctx.seed), args=args, train_dataset=dataset, callbacks=[report]
        )
        _report_after_rng_restore(self.trainer, report)
        last = get_last_checkpoint(str(ctx.ckpt_dir)) if ctx.ckpt_dir.is_dir() else None
        if last is None:
            self.resumed_from = None
            ctx.loaded(None)
        else:
            self.resumed_from = int(os.path.basename(last).rsplit("-", 1)[1])
            ctx.phase(phase.LOAD)
        self.trainer.train(resume_from_checkpoint=last)

    def state(self, ctx: RankContext) -> Mapping[str, Any]:
        import numpy as np
        import torch

        trainer = self.trainer
        out: dict[str, Any] = {}
        named = list(trainer.model.named_parameters())
        for name, p in named:
            out[f"model/{name}"] = p.detach().clone()
        optimizer = trainer.optimizer
        inner = getattr(optimizer, "optimizer", optimizer)  # accelerate's AcceleratedOptimizer
        if inner is not None:
            for name, p in named:
                for key, value in sorted(inner.state.get(p, {}).items()):
                    out[f"optim/{name}/{key}"] = value.detach().clone() if torch.is_tensor(value) else value
            for i, group in enumerate(inner.param_groups):
                for key, value in group.items():
                    if key != "params":
                        out[f"optim/param_groups/{i}/{key}"] = value
        if trainer.lr_scheduler is not None:
            for key, value in trainer.lr_scheduler.state_dict().items():
                if key == "lr_lambdas":
                    continue  # partial objects' __dict__, not state
                out[f"scheduler/{key}"] = list(value) if isinstance(value, list) else value
        out["step"] = trainer.state.global_step
        out["rng/python"] = random.getstate()
        out["rng/numpy"] = np.random.get_state()
        out["rng/torch"] = torch.get_rng_state()
        out.update(_data_position(trainer))
        return out

    def full_state(self, ctx: RankContext) -> Mapping[str, Any]:
        """DDP keeps whole replicas, so everything but the per-rank RNG and
        data position is the same at any world size."""
        return {k: v for k, v in self.state(ctx).items() if not k.startswith(("rng/", "data/"))}

    def teardown(self, ctx: RankContext) -> None:
        self.trainer = None


def _data_position(trainer) -> dict[str, Any]:
    """Where the data stream is, as the Trainer itself knows it: a resume
    rebuilds the position from `global_step` alone (epochs done, batches to
    skip in the current epoch) and the order of an epoch from the sampler's
    `data_seed` plus the epoch number, which `set_epoch` puts back at the start
    of every epoch.

    Not compared: the live counters of the sampler and loader (`epoch`,
    generator state, `iteration`). They carry nothing across a resume (the
    Trainer re-derives them as above) and they move with accelerate's
    one-batch prefetch (exhausting an epoch's sampler bumps its `epoch` and
    draws one more permutation), so their value depends on where between two
    steps one looks, not on whether the resume was right. A wrong order shows
    in the final state: every parameter depends on the batches consumed.
    """
    state = trainer.state
    out: dict[str, Any] = {"data/epoch": state.epoch}
    loader = trainer.callback_handler.train_dataloader
    if loader is None:  # before train() prepared it: a fresh start
        return out
    per_epoch = len(loader) // max(1, trainer.args.gradient_accumulation_steps)
    out["data/epoch_index"], out["data/step_in_epoch"] = divmod(state.global_step, per_epoch)
    sampler = _find_sampler(loader)
    if sampler is None:
        raise RuntimeError(f"no seedable sampler found under {type(loader).__name__}")
    out["data/sampler"] = type(sampler).__name__
    out["data/seed"] = sampler.initial_seed
    return out


def _find_sampler(loader):
    """DataLoaderShard → [BatchSamplerShard →] BatchSampler → SeedableRandomSampler."""
    node = getattr(loader, "batch_sampler", None)
    for _ in range(4):
        if node is None or hasattr(node, "initial_seed"):
            return node
        node = getattr(node, "batch_sampler", None) or getattr(node, "sampler", None)
    return None


if os.environ.get(WARM_ENV) == "1":
    # A transformers release without this table (or with another signature) is warmed without it: a
    # warm-up never fails a run (`launch.preimport`); the ranks fill their caches themselves.
    from ckpt_harness.launch import preimport

    preimport.attempt("filling transformers' checkpoint conversion table", _warm_caches)
