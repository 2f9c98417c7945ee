"""DeepSpeed ZeRO stages 0–3 on CPU/gloo, saved and loaded the DeepSpeed way.

The engine comes from `deepspeed.initialize` with DeepSpeed's own AdamW
(`torch_adam`) and `WarmupLR` scheduler; the model, data and RNG handling are
the ones every built-in job shares (`_common`). Checkpoints are DeepSpeed's:
`engine.save_checkpoint(ckpt_dir, tag="global_step{step}")` and
`engine.load_checkpoint(ckpt_dir)`, which finds its tag through the `latest`
file. Neither the layout nor the commit protocol is ours: a finding of the
harness about them is a finding about DeepSpeed.

What only one rank knows. DeepSpeed's `client_state` goes into the
`*_model_states.pt` file, and in stages 0–2 only data-parallel rank 0 writes
that file (`mp_rank_00_model_states.pt`); every rank then loads rank 0's copy.
Per-rank RNG states restored from `client_state` would hand rank 0's streams
to every rank (ZeRO-3 writes one `zero_pp_rank_{r}_..._model_states.pt` per
rank, so there it would be per rank). So each rank also writes its RNG states
and data position to a side file in the tag directory, before calling
`save_checkpoint` — i.e. before DeepSpeed's `latest` names the tag — through a
Python file object and fsynced. `client_state` still carries the step and the
saving rank's extras, as a user of DeepSpeed would pass them; the side file is
what a resume restores, checked against the step DeepSpeed resumed.

Layout under `ctx.ckpt_dir` (stage 1, world size 2):

    global_step4/rank{r}_extra.pt                  rank r: step, rank, world size,
                                                   RNG states, data position (ours)
    global_step4/mp_rank_00_model_states.pt        dp rank 0: module, scheduler,
                                                   counters, client_state
                                                   (stage 0: also the optimizer)
    global_step4/zero_pp_rank_{r}_mp_rank_00_optim_states.pt
                                                   rank r: its optimizer partition
                                                   (stages 1–3)
    global_step4/zero_to_fp32.py, zero_to_torch.py recovery scripts (rank 0)
    latest                                         rank 0, last: "global_step4"

ZeRO-3 writes `zero_pp_rank_{r}_mp_rank_00_model_states.pt` per rank instead of
`mp_rank_00_model_states.pt`.

What the harness finds in DeepSpeed 0.19.8 (explore, crash faults, stage 1,
world size 2): rank 0 writes `latest` right after its own files, without
waiting for its peers' optimizer partitions (the barrier comes after), so a
peer that crashes while writing `zero_pp_rank_{r}_..._optim_states.pt` leaves
`latest` naming a checkpoint without that partition; on resume only that rank
raises and the others go on (live FAIL). `latest` is opened with "w" and
written in place, so a crash in between leaves it empty, and the resume dies
on a bare `AssertionError` in DeepSpeed's checkpoint loader that names no file
(atomic FAIL). This job passes such errors through as a DeepSpeed user sees
them rather than smoothing them over.

Importing this module is cheap: deepspeed is imported in `setup`. The warm
fork server imports it once (`preload`), and also loads DeepSpeed's CPU
shared-memory comm op, which `deepspeed.comm` builds with gcc on first use (a
few minutes on a cold machine, cached under ~/.cache/torch_extensions after
that): the zygote imports this module with `CKPT_HARNESS_DEEPSPEED_WARM=1`
from `env`, so forked ranks find the op loaded instead of each loading (or
building) it inside their deadline.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Optional

import torch
from torch import nn

from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import (
    BATCH_SIZE,
    TinyJob,
    SyntheticStream,
    _local,
    build_mlp,
    check_extra,
    torch_save_durable,
    unanimous,
)

#: Set in the warm parent through `env`: importing this module there also
#: loads (building if needed) DeepSpeed's JIT comm op, once for every rank.
WARM_ENV = "CKPT_HARNESS_DEEPSPEED_WARM"

LR = 1e-2

#: Modules `deepspeed.initialize` and ZeRO-3 import lazily in every process;
#: the Muon optimizer module alone pulls in torch._inductor (~2 s per rank).
LAZY_MODULES = (
    "deepspeed.runtime.zero.muon.muon_optimizer",
    "deepspeed.module_inject.auto_ep_layer",
    "deepspeed.module_inject.auto_ep_comm",
    "deepspeed.runtime.superoffload.superoffload_stage3",
    "deepspeed.comm.mori",
    "deepspeed.utils.pin_memory",
)


def warm_deepspeed() -> None:
    """Pay DeepSpeed's per-process first-use costs once, in the warm parent.

    - the CPU comm backend loads, and on a cold machine builds with gcc, the
      shared-memory comm op in every process (`deepspeed.comm.torch.
      build_shm_op`); DeepSpeed caches loaded ops per process
      (`OpBuilder._loaded_ops`) and its op-compatibility probe per module, so
      ranks forked afterwards skip both;
    - the lazy imports of `deepspeed.initialize` (`LAZY_MODULES`).

    The fork server `gc.freeze()`s after the preloads, which matters here:
    ZeRO-3's setup runs `gc.collect()`, ~0.9 s per rank when it has to walk
    every object of torch, inductor and deepspeed.
    """
    import importlib

    import deepspeed  # noqa: F401
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    compatible = deepspeed.ops.__compatible_ops__
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None and compatible.get(builder.NAME, False):
        builder.load()
    for module in LAZY_MODULES:
        importlib.import_module(module)


if os.environ.get(WARM_ENV) == "1":
    warm_deepspeed()


def ds_config(stage: int) -> dict[str, Any]:
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        # Partition every parameter: by default ZeRO-3 keeps parameters under
        # 1e5 elements whole on every rank, which for this model is all of them.
        zero["stage3_param_persistence_threshold"] = 0
    return {
        "train_micro_batch_size_per_gpu": BATCH_SIZE,
        "gradient_accumulation_steps": 1,
        "optimizer": {
            "type": "AdamW",
            "params": {"lr": LR, "weight_decay": 0.01, "torch_adam": True},
        },
        "scheduler": {
            "type": "WarmupLR",
            "params": {
                "warmup_min_lr": 0.0,
                "warmup_max_lr": LR,
                "warmup_num_steps": 3,
                "warmup_type": "linear",
            },
        },
        "zero_optimization": zero,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
    }


def extra_name(rank: int) -> str:
    return f"rank{rank}_extra.pt"


class DeepSpeedJob(TinyJob):
    """A DeepSpeed engine over gloo, ZeRO stage `stage`, DeepSpeed checkpoints."""

    name = "deepspeed"
    #: ZeRO stage (0–3).
    stage: ClassVar[int] = 1
    env = {"DS_ACCELERATOR": "cpu", WARM_ENV: "1"}
    preload = ("numpy", "torch", "torch.distributed", "torch._dynamo", "deepspeed", *LAZY_MODULES)

    engine: Any

    def setup(self, ctx: RankContext) -> None:
        import logging

        import deepspeed
        from deepspeed.utils import logger as ds_logger

        ds_logger.setLevel(logging.WARNING)
        # The harness already initialised the default group with gloo:
        # DeepSpeed wraps it instead of creating its own.
        deepspeed.init_distributed(dist_backend="gloo")
        model = build_mlp(ctx.seed)
        self.engine, optimizer, _, scheduler = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=ds_config(self.stage)
        )
        self.model = self.engine.module
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.stream = SyntheticStream(ctx.seed, ctx.rank, ctx.world_size)
        self.step = 0

    def train_step(self, ctx: RankContext, step: int) -> float:
        x, y = self.stream.next_batch()
        loss = nn.functional.mse_loss(self.engine(x), y)
        self.engine.backward(loss)
        self.engine.step()  # optimizer step, then the lr scheduler
        self.step = step
        return loss.item()

    # -- checkpoints -----------------------------------------------------------
    def save(self, ctx: RankContext, step: int) -> None:
        tag = f"global_step{step}"
        tag_dir = Path(ctx.ckpt_dir) / tag
        tag_dir.mkdir(parents=True, exist_ok=True)
        extra = self._extra(ctx, step)
        torch_save_durable(extra, tag_dir / extra_name(ctx.rank))
        self.engine.save_checkpoint(str(ctx.ckpt_dir), tag=tag, client_state={"extra": extra})

    def load(self, ctx: RankContext) -> Optional[int]:
        load_path, client_state = self.engine.load_checkpoint(str(ctx.ckpt_dir))
        if load_path is None:
            return None
        tag_dir = Path(load_path).parent
        step = int(client_state["extra"]["step"])
        unanimous(ctx, lambda: self._restore_side_file(ctx, step, tag_dir))
        return step

    def _restore_side_file(self, ctx: RankContext, step: int, tag_dir: Path) -> None:
        path = tag_dir / extra_name(ctx.rank)
        with open(path, "rb") as f:
            extra = torch.load(f, map_location="cpu", weights_only=False)
        check_extra(extra, ctx, step, path)
        self._restore_extra(extra, step)

    # -- observation -----------------------------------------------------------
    def _named_params(self) -> Iterable[tuple[str, torch.nn.Parameter]]:
        return self.engine.module.named_parameters()

    def _base_optimizer(self) -> torch.optim.Optimizer:
        """The torch AdamW doing the update: stage 0 uses it as is, the ZeRO
        optimizers wrap it around this rank's flat fp32 partitions."""
        opt = self.engine.optimizer
        while not isinstance(opt, torch.optim.Optimizer) and hasattr(opt, "optimizer"):
            opt = opt.optimizer
        return opt

    def state(self, ctx: RankContext) -> Mapping[str, Any]:
        out: dict[str, Any] = {}
        for name, p in self._named_params():
            # ZeRO-3: outside forward a parameter is empty; ds_tensor is the
            # partition this rank owns.
            local = p.ds_tensor if hasattr(p, "ds_tensor") else p
            out[f"model/{name}"] = _local(local)
        base = self._base_optimizer()
        for i, group in enumerate(base.param_groups):
            for j, p in enumerate(group["params"]):
                # The fp32 (master) tensors the optimizer updates: the model
                # parameters themselves in stage 0, this rank's flat partition
                # in stages 1–3.
                out[f"optim/{i}/{j}/param"] = _local(p)
                for key, value in sorted(base.state.get(p, {}).items()):
                    out[f"optim/{i}/{j}/{key}"] = _local(value) if torch.is_tensor(value) else value
        out["engine/global_steps"] = self.engine.global_steps
        out["engine/global_samples"] = self.engine.global_samples
        out["engine/skipped_steps"] = self.engine.skipped_steps
        out.update(self._progress_state(base))
        return out

    def teardown(self, ctx: RankContext) -> None:
        engine = self.__dict__.pop("engine", None)
        if engine is not None and hasattr(engine, "destroy"):
            engine.destroy()
        super().teardown(ctx)


class DeepSpeedZero0(DeepSpeedJob):
    name = "deepspeed_zero0"
    stage = 0


class DeepSpeedZero1(DeepSpeedJob):
    name = "deepspeed_zero1"
    stage = 1


class DeepSpeedZero2(DeepSpeedJob):
    name = "deepspeed_zero2"
    stage = 2


class DeepSpeedZero3(DeepSpeedJob):
    name = "deepspeed_zero3"
    stage = 3
