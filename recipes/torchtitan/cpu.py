"""Every CPU adaptation of the torchtitan recipe, in this one module.

Active only where no GPU is present (`torch.cuda.is_available()` false); on
a GPU machine `adapt()` does nothing and every value below is torchtitan's
own default. torchtitan 0.3.0 targets a GPU and a torch newer than 2.13.0,
so on the CPU build of torch 2.13.0 it needs these, each found by running
it (the error each one avoids is quoted with it):

1. `torch._utils._get_available_device_type` says "cpu" (torchtitan reads
   it at import time, so `adapt()` runs before torchtitan is imported);
2. `torch.cpu` gets the memory-statistics functions torchtitan's
   `DeviceMemoryMonitor` calls on its device module;
3. `torch.cpu.current_device` is 0, the index `dist.barrier(device_ids=...)` takes;
4. `torch.distributed.set_timeout`, which torch 2.13.0 has only privately;
5. FSDP2 reduces gradients with a plain SUM (gloo has no PREMUL_SUM);
6. torchtitan's `FlexAttention` computes the same masked attention through
   SDPA (FlexAttention has no backward on CPU);
7. `SPMD_BACKEND`: the `parallelism.spmd_backend` setting the recipe's
   config takes (torchtitan's default fails in `fully_shard` here).

None of them touches checkpoint code: torchtitan's `CheckpointManager`, DCP,
the state dicts and what is saved, when and where are as torchtitan ships
them. Not patched because not needed: the process group (torchtitan picks
gloo for the "cpu" device type by itself).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import torch

#: True on a machine without a CUDA device: the recipe runs on CPU.
NO_GPU = not torch.cuda.is_available()

#: `ParallelismConfig.spmd_backend`. torchtitan 0.3.0's default, "spmd_types", fails in FSDP2's
#: `fully_shard` with `ValueError: When dp_mesh_dims is provided, all parameters must be DTensors
#: on the full SPMD mesh (e.g. via distribute_module). Got plain tensor for parameter 'weight'.`;
#: "partial_dtensor" is the other backend torchtitan 0.3.0 documents (`--parallelism.spmd_backend`).
SPMD_BACKEND = "partial_dtensor" if NO_GPU else "spmd_types"

_done = False


def adapt() -> None:
    """Apply adaptations 1-6 (no GPU only). Call before anything imports torchtitan."""
    global _done
    if not NO_GPU or _done:
        return
    _done = True
    _device_type_is_cpu()
    _cpu_memory_stats()
    _cpu_current_device()
    _set_timeout()
    _fsdp_sum_reduction()
    _flex_attention_through_sdpa()


def _device_type_is_cpu() -> None:
    """1. torchtitan's `tools/utils.py` sets `device_type = _get_available_device_type() or "cuda"`
    at import: with no accelerator torch says None, so torchtitan falls back to CUDA and dies in
    `Trainer.__init__` (`device_module.set_device`) with `AttributeError: module 'torch._C' has
    no attribute '_cuda_setDevice'`. Saying "cpu" makes its device module `torch.cpu`."""
    import torch._utils

    torch._utils._get_available_device_type = lambda: "cpu"


def _cpu_memory_stats() -> None:
    """2. torchtitan's `components/metrics.py` `DeviceMemoryMonitor` calls its device module's
    `get_device_name`, `get_device_properties(...).total_memory`, `reset_peak_memory_stats`,
    `empty_cache` and `memory_stats`; `torch.cpu` has none of them: `AttributeError: module
    'torch.cpu' has no attribute 'get_device_name'`. Given here: the host's name and memory, and
    no statistics (an empty dict, which the monitor reports as -1)."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    stubs = {
        "get_device_name": lambda device=None: "cpu",
        "get_device_properties": lambda device=None: SimpleNamespace(name="cpu", total_memory=total),
        "reset_peak_memory_stats": lambda device=None: None,
        "empty_cache": lambda: None,
        "memory_stats": lambda device=None: {},
    }
    for name, stub in stubs.items():
        if not hasattr(torch.cpu, name):
            setattr(torch.cpu, name, stub)


def _cpu_current_device() -> None:
    """3. After the first step torchtitan's `distributed/utils.py` `set_pg_timeouts` calls
    `dist.barrier(device_ids=[device_module.current_device()])`; `torch.cpu.current_device()`
    returns the string "cpu", and the barrier takes integers only: `TypeError: (): incompatible
    function arguments ... Invoked with: ... ['cpu']`. The one CPU device is index 0."""
    torch.cpu.current_device = lambda: 0


def _set_timeout() -> None:
    """4. The same `set_pg_timeouts` then calls `torch.distributed.set_timeout(timeout, group)`,
    public in a torch newer than 2.13.0: `AttributeError: module 'torch.distributed' has no
    attribute 'set_timeout'`. torch 2.13.0 has it as `distributed_c10d._set_pg_timeout(timeout,
    group)`, same arguments."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d

    if not hasattr(dist, "set_timeout"):
        dist.set_timeout = distributed_c10d._set_pg_timeout


def _fsdp_sum_reduction() -> None:
    """5. torchtitan scales gradients itself and calls FSDP2's `set_gradient_divide_factor(1.0)`
    on every FSDP module (`distributed/fsdp.py` `disable_fsdp_gradient_division`); FSDP2 turns a
    custom factor into `ReduceOp.PREMUL_SUM`, which gloo lacks: `RuntimeError: Cannot use
    ReduceOp.PREMUL_SUM with Gloo` in the reduce-scatter of the first backward. FSDP2's own
    `set_force_sum_reduction_for_comms(True)` (which torchtitan itself sets for its symmetric-
    memory path) makes it a SUM, then divides by the same factor (1.0): the same gradients.
    Patched on torch's `FSDPModule`, so every call torchtitan makes gets it."""
    from torch.distributed.fsdp import FSDPModule

    original = FSDPModule.set_gradient_divide_factor

    def set_gradient_divide_factor(self, factor: float) -> None:
        original(self, factor)
        self.set_force_sum_reduction_for_comms(True)

    FSDPModule.set_gradient_divide_factor = set_gradient_divide_factor


def _flex_attention_through_sdpa() -> None:
    """6. The llama3 models' attention is FlexAttention (0.3.0 refuses "sdpa" for language
    models: `ValueError: sdpa is no longer supported for language models; positions are always
    available so use flex, flex_flash, or varlen.`), and FlexAttention has no backward on CPU:
    `NotImplementedError: FlexAttention does not support backward on CPU. Please set the input
    requires_grad to False or use another device.` `FlexAttention.forward` is replaced by one
    that materialises the same BlockMask's `mask_mod` as a dense boolean mask
    (`torch.nn.attention.flex_attention.create_mask`) and calls `scaled_dot_product_attention`
    with it: the same attention (causal or block-causal, with the same scale and GQA), computed
    densely. `score_mod` and `out_transform` (the log-sum-exp) are not supported: the llama3
    models use neither, and the replacement says so if one is passed."""
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import BlockMask, create_mask

    from torchtitan.models.common.attention import FlexAttention

    def forward(self, q_BLNH, k_BLNH, v_BLNH, *, attention_masks: BlockMask, score_mod=None, scale=None,
                enable_gqa: bool = False, out_transform=None, **kwargs):
        if score_mod is not None or out_transform is not None:
            raise NotImplementedError("recipes/torchtitan/cpu.py: FlexAttention on CPU through SDPA takes "
                                      "neither score_mod nor out_transform")
        q, k, v = (t.transpose(1, 2) for t in (q_BLNH, k_BLNH, v_BLNH))  # (B, N, L, H), as flex_attention
        batch, heads, q_len, kv_len = attention_masks.shape
        mask = create_mask(attention_masks.mask_mod, batch, heads, q_len, kv_len, device=q.device)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=enable_gqa)
        return out.transpose(1, 2)  # back to (B, L, N, H)

    FlexAttention.forward = forward
