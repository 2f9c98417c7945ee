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

World-size change. Stages 1–3 refuse optimizer partitions of another world
size ("Automatic adjustment of ZeRO's optimizer state partitioning with a new
world size is not currently supported"); DeepSpeed's supported way is its
universal checkpoint. When the checkpoint `latest` names was written at
another world size (rank 0's side file says which), `setup` builds the engine
with `"checkpoint": {"load_universal": true}` and `load` has rank 0 run
`deepspeed.checkpoint.ds_to_universal` on it, into
`global_step4_universal/` (plus DeepSpeed's `latest_universal` pointer) next
to the original, then loads that. Stage 0 needs no conversion: its
model-states file holds the whole optimizer and loads at any world size. The
RNG streams and data shards are per rank and have no counterpart at the new
world size: they keep their fresh seeding (`TinyJob._restore_resharded`), and
no side file of a rank that no longer exists is read. `full_state` gathers
the parameters, fp32 master copies and Adam moments through DeepSpeed's
`GatheredParameters` and `safe_get_full_*` accessors; all four stages resume
bitwise at 2N and N/2 on CPU/gloo.

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

Importing this module is cheap: deepspeed is imported in `setup`. DeepSpeed's
CPU shared-memory comm op is built with gcc on first use (a few minutes on a
cold machine, under `TORCH_EXTENSIONS_DIR`, one per interpreter): `jit_ops`
names it, so the harness builds it in a process of its own before any
deadline starts (`ckpt_harness.jit`). The warm fork server then imports this
module (`preload`) with `CKPT_HARNESS_DEEPSPEED_WARM=1` from `env` and loads
the built op once, so forked ranks find it loaded.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any, ClassVar, Iterable, Mapping, Optional

import torch
from torch import nn

from ckpt_harness.job.axes import Axes
from ckpt_harness.jit import JitOp
from ckpt_harness.job import RankContext
from ckpt_harness.jobs._common import (
    TINY_AXES,
    TinyJob,
    _local,
    build_mlp,
    check_extra,
    torch_save_durable,
    unanimous,
    world_independent,
)
from ckpt_harness.jobs._data import BATCH_SIZE, build_data

#: Set in the warm parent through `env`: importing this module there also
#: loads (building if needed) DeepSpeed's JIT comm op, once for every rank.
WARM_ENV = "CKPT_HARNESS_DEEPSPEED_WARM"

LR = 1e-2

#: Modules `deepspeed.initialize` and ZeRO-3 import lazily in every process;
#: the Muon optimizer module alone pulls in torch._inductor (~2 s per rank).
#: Those of DeepSpeed 0.19.8: a release without one of them (0.18 has no
#: `auto_ep_layer`) is warmed without it, with a note (`launch.preimport`).
LAZY_MODULES = (
    "deepspeed.runtime.zero.muon.muon_optimizer",
    "deepspeed.module_inject.auto_ep_layer",
    "deepspeed.module_inject.auto_ep_comm",
    "deepspeed.runtime.superoffload.superoffload_stage3",
    "deepspeed.comm.mori",
    "deepspeed.utils.pin_memory",
)


def build_comm_op() -> None:
    """Load DeepSpeed's shared-memory comm op, building it with gcc if need
    be: what its CPU comm backend does in every process at
    `init_distributed` (`deepspeed.comm.torch.build_shm_op`). The JIT
    builder of `jit_ops` and of scripts (`targets.script_ops`), run in a
    process of its own: a failed build raises there, so it is said and not
    stamped (`jit.ensure_built`). DeepSpeed caches a loaded op per process
    (`OpBuilder._loaded_ops`) and its op-compatibility probe per module."""
    import deepspeed.ops
    from deepspeed.accelerator import get_accelerator

    compatible = deepspeed.ops.__compatible_ops__
    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is not None and compatible.get(builder.NAME, False):
        builder.load()


def warm_deepspeed(modules: Iterable[str] = LAZY_MODULES) -> None:
    """Pay DeepSpeed's per-process first-use costs once, in the warm parent,
    so that ranks forked afterwards skip them: the comm op loaded
    (`build_comm_op`) and the lazy imports of `deepspeed.initialize`
    (`modules`). Each steps aside on its own (`launch.preimport`): a module
    the installed release lacks (0.18 has no `auto_ep_layer`: the list is
    one release's) is not pre-imported and the rest still are; an op that
    does not load is left to the ranks, which load (or fail to load) it
    themselves as a user's processes would. A warm-up never fails a run.

    The fork server `gc.freeze()`s after the preloads, which matters here:
    ZeRO-3's setup runs `gc.collect()`, ~0.9 s per rank when it has to walk
    every object of torch, inductor and deepspeed.
    """
    from ckpt_harness.launch import preimport

    if preimport.preimport(["deepspeed"]):
        return  # nothing of DeepSpeed's to warm; the ranks say why it does not import
    preimport.attempt("loading DeepSpeed's CPU comm op", build_comm_op)
    preimport.preimport(modules)


#: torch's JIT ops go to one directory per interpreter: two checkouts (or a
#: CI clone and a working tree) sharing ~/.cache/torch_extensions rebuild the
#: op in turn, and a build cut short by a deadline leaves a `lock` file that
#: makes every later process wait for it forever.
os.environ.setdefault("TORCH_EXTENSIONS_DIR", os.path.join(sys.prefix, "torch_extensions"))

if os.environ.get(WARM_ENV) == "1":  # in the warm parent (and a rank that imports this module itself)
    warm_deepspeed()


#: DeepSpeed's optimizer type for each value of the `optimizer` axis: its own
#: AdamW (torch's, `torch_adam`), and torch's SGD and Adagrad by name (what
#: DeepSpeed builds for a type it has no optimizer of its own for).
DS_OPTIMIZERS = {
    "adamw": ("AdamW", {"weight_decay": 0.01, "torch_adam": True}),
    "sgd": ("SGD", {"momentum": 0.9, "weight_decay": 0.01}),
    "adagrad": ("Adagrad", {"initial_accumulator_value": 0.1, "weight_decay": 0.01}),
}
#: The per-tensor state each optimizer keeps besides its step (what `full_state` gathers).
STATE_KEYS = {"adamw": ("exp_avg", "exp_avg_sq"), "sgd": ("momentum_buffer",), "adagrad": ("sum",)}


def ds_config(stage: int, load_universal: bool = False, axes: Axes = Axes()) -> dict[str, Any]:
    """`load_universal` makes `engine.load_checkpoint` read a universal
    checkpoint (`ds_to_universal`'s output) instead of the ZeRO partitions:
    DeepSpeed reads the switch only at load time, but only from the config.

    `axes.precision` bf16 is DeepSpeed's own bf16 mode: bf16 weights, fp32
    master copies in its optimizer."""
    zero: dict[str, Any] = {"stage": stage}
    if stage == 3:
        # Partition every parameter: by default ZeRO-3 keeps parameters under
        # 1e5 elements whole on every rank, which for this model is all of them.
        zero["stage3_param_persistence_threshold"] = 0
    kind, params = DS_OPTIMIZERS[axes.optimizer]
    bf16 = {"bf16": {"enabled": True}} if axes.precision == "bf16" else {}
    return {
        "train_micro_batch_size_per_gpu": BATCH_SIZE,
        "gradient_accumulation_steps": 1,
        "optimizer": {"type": kind, "params": {"lr": LR, **params}},
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
        # ZeRO refuses an optimizer it was not tested with (SGD) unless told, as a user tells it
        "zero_allow_untested_optimizer": axes.optimizer == "sgd",
        **bf16,
        "steps_per_print": 10**9,
        "wall_clock_breakdown": False,
        "checkpoint": {"load_universal": load_universal},
    }


def extra_name(rank: int) -> str:
    return f"rank{rank}_extra.pt"


def universal_tag(tag: str) -> str:
    """Where a world-size change converts `tag` to, next to it in ckpt_dir."""
    return f"{tag}_universal"


def latest_tag(ckpt_dir: Path) -> Optional[str]:
    """The tag DeepSpeed's `latest` names, or None if there is none to read."""
    try:
        return (Path(ckpt_dir) / "latest").read_text().strip() or None
    except OSError:
        return None


def saved_world_size(ckpt_dir: Path) -> Optional[int]:
    """The world size that wrote the checkpoint `latest` names, from rank 0's
    side file (written before rank 0's `save_checkpoint`, so before `latest`
    names the tag). None when that cannot be read: the resume then goes down
    DeepSpeed's ordinary path and fails, or not, the way DeepSpeed does."""
    tag = latest_tag(ckpt_dir)
    if tag is None:
        return None
    try:
        with open(Path(ckpt_dir) / tag / extra_name(0), "rb") as f:
            return int(torch.load(f, map_location="cpu", weights_only=True)["world_size"])
    except Exception:
        return None


def convert_to_universal(tag_dir: Path, out_dir: Path) -> None:
    """DeepSpeed's own `ds_to_universal` (the script's `main`), in process.

    One worker each: the pools fork, and a rank has gloo threads running.
    `inject_missing_state`: the universal-checkpoint info the converter asks
    for is what Megatron-style models attach; a plain module has none. A
    leftover `out_dir` (a conversion that died) is converted afresh."""
    import argparse
    import contextlib
    import io
    import shutil

    from deepspeed.checkpoint import ds_to_universal

    shutil.rmtree(out_dir, ignore_errors=True)
    args = argparse.Namespace(
        input_folder=str(tag_dir), output_folder=str(out_dir), num_extract_workers=1,
        num_merge_workers=1, keep_temp_folder=False, strict=True, inject_missing_state=True,
    )
    with contextlib.redirect_stdout(io.StringIO()):
        ds_to_universal.main(args)


class DeepSpeedJob(TinyJob):
    """A DeepSpeed engine over gloo, ZeRO stage `stage`, DeepSpeed checkpoints."""

    #: ZeRO stage (0–3).
    stage: ClassVar[int] = 1
    checkpoint_layout = "deepspeed"
    requires = {"deepspeed": "ckpt-harness[deepspeed]"}
    #: DeepSpeed's own precision modes, but not fp16: its CPU accelerator
    #: refuses it ("Type fp16 is not supported on your device", 0.19.8); no
    #: torch.compile (DeepSpeed's `engine.compile` is a path of its own).
    axes = {**{name: values for name, values in TINY_AXES.items() if name != "compile"},
            "precision": ("fp32", "bf16")}

    @classmethod
    def jit_ops(cls) -> tuple[JitOp, ...]:
        """The CPU comm op, built by `build_comm_op` in a process of its own."""
        from importlib import metadata

        key = f"deepspeed {metadata.version('deepspeed')}, torch {torch.__version__}, {sys.executable}"
        return (JitOp("DeepSpeed's CPU comm op", Path(os.environ["TORCH_EXTENSIONS_DIR"]) / "deepspeed_shm_comm",
                      f"{__name__}:build_comm_op", key, env={"DS_ACCELERATOR": "cpu"}),)
    env = {"DS_ACCELERATOR": "cpu", WARM_ENV: "1"}
    #: This module last: imported in the warm parent with WARM_ENV set, it runs
    #: `warm_deepspeed` there once; a rank that imported it itself ran the
    #: warm-up again (0.8-1.0 s per deepspeed rank, docs/speed.md).
    preload = ("numpy", "torch", "torch.distributed", "torch._dynamo", "deepspeed", *LAZY_MODULES, __name__)

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
        config = ds_config(self.stage, load_universal=self._needs_universal(ctx), axes=ctx.axes)
        self.engine, optimizer, _, scheduler = deepspeed.initialize(
            model=model, model_parameters=model.parameters(), config=config
        )
        self.model = self.engine.module
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.stream = build_data(ctx.axes.data, ctx.seed, ctx.rank, ctx.world_size)
        self._state_keys = STATE_KEYS[ctx.axes.optimizer]
        self.step = 0

    def train_step(self, ctx: RankContext, step: int) -> float:
        x, y = self.stream.next_batch()
        # the bf16 mode casts the module, not its inputs
        out = self.engine(x.to(next(self.engine.module.parameters()).dtype))
        loss = nn.functional.mse_loss(out.float(), y)
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

    def _needs_universal(self, ctx: RankContext) -> bool:
        """Whether the resume must go through a universal checkpoint: stages
        1–3 partition the optimizer by world size and refuse partitions of
        another one ("Automatic adjustment of ZeRO's optimizer state
        partitioning with a new world size is not currently supported").
        Stage 0 keeps the whole optimizer in the model-states file, which
        loads at any world size as it is. Decided before `initialize`,
        because the config is the only place DeepSpeed takes the switch."""
        saved = saved_world_size(ctx.ckpt_dir)
        return self.stage > 0 and saved is not None and saved != ctx.world_size

    def load(self, ctx: RankContext) -> Optional[int]:
        if self.engine.load_universal_checkpoint():
            tag = self._convert(ctx)
            load_path, client_state = self.engine.load_checkpoint(str(ctx.ckpt_dir), tag=universal_tag(tag))
            tag_dir = Path(ctx.ckpt_dir) / tag
        else:
            load_path, client_state = self.engine.load_checkpoint(str(ctx.ckpt_dir))
            tag_dir = None if load_path is None else Path(load_path).parent
        if load_path is None:
            return None
        extra = client_state["extra"]
        step = int(extra["step"])
        if int(extra["world_size"]) != ctx.world_size:
            # The saving rank 0's extras, from DeepSpeed's model-states file:
            # side files of ranks that no longer exist are not needed.
            unanimous(ctx, lambda: self._restore_resharded(extra, step))
            return step
        unanimous(ctx, lambda: self._restore_side_file(ctx, step, tag_dir))
        return step

    def _convert(self, ctx: RankContext) -> str:
        """Rank 0 converts the checkpoint `latest` names; the others wait in
        `unanimous`, which also hands them rank 0's error if it fails."""
        tag = latest_tag(ctx.ckpt_dir)
        if tag is None:
            raise FileNotFoundError(f"{ctx.ckpt_dir}/latest: gone since setup found it")

        def convert() -> str:
            if ctx.rank == 0:
                convert_to_universal(Path(ctx.ckpt_dir) / tag, Path(ctx.ckpt_dir) / universal_tag(tag))
            return tag

        return unanimous(ctx, convert)

    def _restore_side_file(self, ctx: RankContext, step: int, tag_dir: Path) -> None:
        path = tag_dir / extra_name(ctx.rank)
        with open(path, "rb") as f:
            extra = torch.load(f, map_location="cpu", weights_only=True)
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

    def _master_tensors(self, base: torch.optim.Optimizer) -> list[torch.Tensor]:
        """The fp32 tensors the optimizer updates: the model parameters
        themselves in stage 0, this rank's flat partitions in stages 1–3.
        ZeRO-3 puts its sub-group partitions into `param_groups` only for the
        duration of a step; between steps they are its flat fp32 groups."""
        tensors = [p for group in base.param_groups for p in group["params"]]
        return tensors or list(getattr(self.engine.optimizer, "fp32_partitioned_groups_flat", []))

    def state(self, ctx: RankContext) -> Mapping[str, Any]:
        out: dict[str, Any] = {}
        for name, p in self._named_params():
            # ZeRO-3: outside forward a parameter is empty; ds_tensor is the
            # partition this rank owns.
            local = p.ds_tensor if hasattr(p, "ds_tensor") else p
            out[f"model/{name}"] = _local(local)
        base = self._base_optimizer()
        for j, p in enumerate(self._master_tensors(base)):
            out[f"optim/{j}/param"] = _local(p)
            for key, value in sorted(base.state.get(p, {}).items()):
                out[f"optim/{j}/{key}"] = _local(value) if torch.is_tensor(value) else value
        out["engine/global_steps"] = self.engine.global_steps
        out["engine/global_samples"] = self.engine.global_samples
        out["engine/skipped_steps"] = self.engine.skipped_steps
        out.update(self._progress_state(base))
        return out

    def full_state(self, ctx: RankContext) -> Mapping[str, Any]:
        """Whole parameters, fp32 master copies and Adam moments, through
        DeepSpeed's own accessors (`safe_get_full_*`, collectives over the
        data-parallel group in every stage but 0), plus what `state` has
        that is not per rank. Every rank calls this in the same order."""
        out: dict[str, Any] = {}
        named = list(self._named_params())
        out.update(self._full_params(named))
        base = self._base_optimizer()
        step = self._optimizer_step(base)
        # Adagrad's state exists before its first step, but DeepSpeed links a parameter
        # to its optimizer state fragments only in a step (or a load): its accessor needs both
        linked = all(getattr(getattr(p, "_hp_mapping", None), "optim_fragment", {}) is not None for _, p in named)
        moments = self._all_started(any(base.state.values()) and linked)
        for name, p in named:
            out.update(self._full_optimizer_state(name, p, moments))
        out["optim/step"] = step
        out["engine/global_steps"] = self.engine.global_steps
        out["engine/global_samples"] = self.engine.global_samples
        out["engine/skipped_steps"] = self.engine.skipped_steps
        out.update(world_independent(self._progress_state(base)))
        return out

    def _full_params(self, named: list[tuple[str, torch.nn.Parameter]]) -> dict[str, torch.Tensor]:
        """ZeRO-3 keeps only this rank's partition outside forward: gather."""
        import deepspeed

        params = [p for _, p in named]
        with deepspeed.zero.GatheredParameters(params, enabled=self.stage == 3):
            return {f"model/{name}": _local(p) for name, p in named}

    def _full_optimizer_state(self, name: str, p: torch.nn.Parameter, moments: bool) -> dict[str, Any]:
        """The fp32 master copy (stages 1–3), and the Adam moments if
        `moments` (see `_all_started`)."""
        if self.stage == 0:
            # No master copy: AdamW updates the parameter and keeps its moments.
            state = self._base_optimizer().state.get(p, {})
            return {f"optim/{name}/{k}": _local(state[k]) for k in self._state_keys if k in state}
        from deepspeed.utils import safe_get_full_fp32_param, safe_get_full_optimizer_state

        out = {f"optim/{name}/param": _local(safe_get_full_fp32_param(p))}
        for key in self._state_keys if moments else ():
            value = safe_get_full_optimizer_state(p, key)
            if value is not None:
                out[f"optim/{name}/{key}"] = _local(value)
        return out

    def _optimizer_step(self, base: torch.optim.Optimizer) -> Any:
        """AdamW's step count, None before its first step. It keeps one per
        tensor it updates: the parameters in stage 0, this rank's flat
        partition in stages 1–2, and in stage 3 the sub-group partitions,
        which ZeRO-3 puts into `param_groups` only for the duration of a step
        (so they are found through `state`, not `param_groups`)."""
        steps = [state["step"] for state in base.state.values() if "step" in state]
        if len({float(s) for s in steps}) > 1:
            raise RuntimeError(f"optimizer tensors at different steps: {sorted({float(s) for s in steps})}")
        if not steps:
            return None
        return _local(steps[0]) if torch.is_tensor(steps[0]) else steps[0]

    def _all_started(self, started: bool) -> bool:
        """Whether the optimizer has state on every rank (`started` here).
        AdamW's moments and SGD's momentum are created in its first step, and
        DeepSpeed's accessors raise on a rank without them while the others
        wait in the all-reduce; asked once, collectively, every rank skips
        the moments alike (and the comparison shows them missing) instead of
        hanging."""
        import torch.distributed as dist

        flag = torch.tensor([int(started)], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())

    def teardown(self, ctx: RankContext) -> None:
        engine = self.__dict__.pop("engine", None)
        if engine is not None and hasattr(engine, "destroy"):
            engine.destroy()
        super().teardown(ctx)


class DeepSpeedZero0(DeepSpeedJob):
    stage = 0


class DeepSpeedZero1(DeepSpeedJob):
    stage = 1


class DeepSpeedZero2(DeepSpeedJob):
    stage = 2


class DeepSpeedZero3(DeepSpeedJob):
    stage = 3
