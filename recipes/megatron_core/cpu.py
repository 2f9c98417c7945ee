"""Every CPU adaptation of the Megatron-Core recipe, in this one module.

Active only where no GPU is present (`torch.cuda.is_available()` false); on
a GPU machine `adapt()` does nothing and every value below is the one a GPU
run uses. Two functions of `torch.cuda` are given their CPU meaning, because
Megatron-Core 0.19.2's `dist_checkpointing` calls them unconditionally on its
save path; nothing of Megatron-Core itself is patched, and what it writes,
when and in which order is unchanged:

- `torch.cuda.synchronize()`: `strategies/filesystem_async.py`
  (`preload_tensors`) waits for the device's copies to host memory before it
  writes. Without a GPU there are none to wait for: a no-op, as it is on a
  machine whose tensors are all on the CPU already. Unpatched, the CPU build
  of torch raises `AssertionError: Torch not compiled with CUDA enabled`
  there, on every save.
- `torch.cuda.current_device()`: `strategies/state_dict_saver.py` makes the
  flag its ranks all-reduce to agree that every write succeeded with
  `torch.tensor(..., device=torch.cuda.current_device())`. "cpu" puts it
  where gloo reduces it.
"""

import torch

#: True on a machine without a CUDA device: the recipe runs on CPU.
NO_GPU = not torch.cuda.is_available()

#: The process group's backend: Megatron-LM initializes NCCL; the CPU build of torch has only gloo.
BACKEND = "gloo" if NO_GPU else "nccl"

#: Where the recipe's tensors live, and the all-reduce of the tracker's iteration (Megatron-LM's
#: `read_metadata` puts it on 'cuda').
DEVICE = "cpu" if NO_GPU else "cuda"


def adapt() -> None:
    """Give `torch.cuda.synchronize` and `torch.cuda.current_device` their CPU meaning (no GPU only)."""
    if NO_GPU:
        torch.cuda.synchronize = lambda device=None: None
        torch.cuda.current_device = lambda: "cpu"
