"""Every CPU adaptation of the LLaMA-Factory recipe, in this one module: one import.

`adapt()` stands in an empty `torchaudio` module where torchaudio is not
installed. `llamafactory/data/mm_plugin.py` (imported by every stage, `pt`
included) has `import torchaudio` at module level, though only audio inputs
use it. PyPI's torchaudio is a CUDA build that fails under the CPU torch
(`OSError: libc10_cuda.so: cannot open shared object file: No such file or
directory`), so the Makefile removes it (uninstall.txt), and then the import
fails: `ModuleNotFoundError: No module named 'torchaudio'`.

Not adapted, because not needed: the device and the process group. With no
GPU, accelerate makes each rank's device `cpu:0` and transformers picks gloo
by itself (measured: `use_cpu: false`, `ddp_backend` unset, 2 ranks train and
save); `use_cpu: true` and `ddp_backend: gloo` change neither (the device is
still `cpu:0`). So train.yaml is the same on a GPU machine and here.

Nothing here touches checkpoint code: the HF Trainer's `_save_checkpoint`,
`_load_from_checkpoint`, `_load_optimizer_and_scheduler` and
`_load_rng_state`, LLaMA-Factory's resume (its `get_last_checkpoint` of
`output_dir`) and torch's serialization are as shipped. That is why the
resume cannot run on CPU (README.md, "Resume on CPU: not possible").
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import sys
import types


def adapt() -> None:
    """Stand in an empty `torchaudio` where none is installed. Call before llamafactory is imported.

    Keyed to torchaudio's absence rather than to `torch.cuda.is_available()`: the Makefile removes
    PyPI's torchaudio on every machine (uninstall.txt), and `import llamafactory.data` needs the name
    on a GPU machine too; where a working torchaudio is installed, it is used and nothing is patched.
    The module has a spec (transformers' `is_torchaudio_available` calls `importlib.util.find_spec`,
    which raises `ValueError: torchaudio.__spec__ is None` for a bare module) and no attributes: any
    use of it (an audio input) raises AttributeError naming this file."""
    if "torchaudio" in sys.modules or importlib.util.find_spec("torchaudio") is not None:
        return
    stub = types.ModuleType("torchaudio", "recipes/llamafactory/cpu.py: an empty stand-in, no audio")
    stub.__spec__ = importlib.machinery.ModuleSpec("torchaudio", loader=None)

    def __getattr__(name: str):
        raise AttributeError(f"torchaudio.{name}: torchaudio is an empty stand-in here (recipes/llamafactory/"
                             "cpu.py: PyPI has only a CUDA build); audio inputs are not supported")

    stub.__getattr__ = __getattr__
    sys.modules["torchaudio"] = stub
