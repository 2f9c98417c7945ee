"""What a script's frameworks build on first use, read from what it imports:
named where its workers will load it, with the accelerator it picks; and
nothing for a script that imports no such framework. (That the op is then
built before the first deadline is tests/test_script_frameworks.py's.)"""

import pytest

from ckpt_harness.targets import script_ops

DEEPSPEED = "deepspeed_shm_comm"


def script(tmp_path, text: str):
    path = tmp_path / "train.py"
    path.write_text(text)
    return path


@pytest.mark.parametrize("text, found", [
    ("import deepspeed\n", {"deepspeed"}),
    ("from deepspeed.utils import logger\nimport os, torch.nn as nn\n", {"deepspeed", "os", "torch"}),
    ("def main():\n    import deepspeed\n", {"deepspeed"}),  # a lazy import in a function is an import
    ("from . import deepspeed\n", set()),  # a module of the script's own package
    ("import deepspeed(\n", set()),  # not Python: nothing is read from it
])
def test_the_imports_of_a_script_are_its_top_level_packages(text, found):
    assert script_ops.imported(text) == found


def test_a_deepspeed_script_names_the_comm_op_where_its_workers_load_it(tmp_path):
    ext = tmp_path / "ext"
    sets_cpu = script(tmp_path, 'import os\nos.environ.setdefault("DS_ACCELERATOR", "cpu")\nimport deepspeed\n')
    (op,) = script_ops.jit_ops(sets_cpu, {"TORCH_EXTENSIONS_DIR": str(ext)})
    assert op.build_dir == ext / DEEPSPEED and op.builder.endswith(":build_comm_op")
    assert op.env == {"TORCH_EXTENSIONS_DIR": str(ext), "DS_ACCELERATOR": "cpu"}
    assert op.key.startswith("deepspeed ") and ", torch " in op.key
    # the environment's accelerator is the workers' (the script only sets a default)
    (op,) = script_ops.jit_ops(sets_cpu, {"TORCH_EXTENSIONS_DIR": str(ext), "DS_ACCELERATOR": "cuda"})
    assert op.env["DS_ACCELERATOR"] == "cuda"
    # neither says: DeepSpeed's own detection decides in the builder, as in the workers
    (op,) = script_ops.jit_ops(script(tmp_path, "import deepspeed\n"), {"TORCH_EXTENSIONS_DIR": str(ext)})
    assert op.env == {"TORCH_EXTENSIONS_DIR": str(ext)}


def test_a_script_with_no_such_framework_or_no_file_builds_nothing(tmp_path):
    env = {"TORCH_EXTENSIONS_DIR": str(tmp_path)}
    assert script_ops.jit_ops(script(tmp_path, "import torch\nimport accelerate\n"), env) == ()
    assert script_ops.jit_ops(tmp_path / "missing.py", env) == ()
    assert script_ops.jit_ops(None, env) == ()


def test_without_torch_extensions_dir_the_op_is_where_torch_itself_builds_it(tmp_path, monkeypatch):
    """Asked of torch in a process of its own; the same as torch answers here."""
    from torch.utils.cpp_extension import _get_build_directory

    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    found = script_ops.build_dir(DEEPSPEED, env)
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR", raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert str(found) == _get_build_directory(DEEPSPEED, False)
    assert found.is_relative_to(tmp_path / "cache")


def test_where_torch_cannot_say_the_script_builds_in_its_run_as_before_and_is_told_so(tmp_path, capsys):
    """A cache directory that cannot be made (here a file): torch fails to
    name its build directory. That is the set-up's, not the script's: no op
    is built before the run, and the line says the first run builds it."""
    (tmp_path / "cache").write_text("")
    env = {"HOME": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "cache")}
    assert script_ops.jit_ops(script(tmp_path, "import deepspeed\n"), env) == ()
    assert "not building DeepSpeed's CPU comm op before the first run" in capsys.readouterr().err
