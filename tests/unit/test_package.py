"""`import ckpt_harness` is cheap: the fresh interpreters the harness starts
(DCP's checkpoint process, torchrun's agent and workers) import only what they use."""

import json
import os
import subprocess
import sys
from pathlib import Path

import ckpt_harness
import pytest

#: What a process the harness starts fresh may import of the harness, and no more.
RANK_SIDE = {
    "ckpt_harness", "ckpt_harness.errors", "ckpt_harness.phase", "ckpt_harness.inject",
    "ckpt_harness.inject.faults", "ckpt_harness.inject.files", "ckpt_harness.inject.probes",
    "ckpt_harness.inject.trace", "ckpt_harness.inject.tracer", "ckpt_harness.inject.writers",
}


def imported(code: str) -> list[str]:
    """The harness modules a fresh interpreter holds after `code`; `torch` too if it was imported."""
    probe = f"{code}\nimport json, sys\nprint(json.dumps([m for m in sys.modules if m.split('.')[0] in " \
            "('ckpt_harness', 'torch', 'numpy')]))"
    # This tree's package, whatever the current directory or an editable install would put first.
    env = {**os.environ, "PYTHONPATH": str(Path(ckpt_harness.__file__).resolve().parents[1])}
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         cwd="/", env=env).stdout
    return json.loads(out)


def test_importing_the_package_imports_nothing_else():
    assert imported("import ckpt_harness") == ["ckpt_harness"]


def test_a_spawned_checkpoint_process_and_torchrun_bootstraps_import_only_the_rank_side():
    """DCP's checkpoint process imports the zygote (the rank's `__main__`) and
    the probes; torchrun's agent and workers their bootstraps. None of them
    needs the pipeline, the oracle or the configs (and no torch from us)."""
    modules = set(imported("import ckpt_harness.launch.zygote, ckpt_harness.inject.probes, "
                           "ckpt_harness.launch.agent, ckpt_harness.launch.worker"))
    launch = {m for m in modules if m.startswith("ckpt_harness.launch")}
    assert modules - launch <= RANK_SIDE, sorted(modules - launch - RANK_SIDE)


@pytest.mark.parametrize("name", ckpt_harness.__all__)
def test_every_exported_name_resolves(name):
    value = getattr(ckpt_harness, name)
    assert value.__name__ == name and name in dir(ckpt_harness)
    assert ckpt_harness.__dict__[name] is value  # a plain attribute from now on


def test_exports_and_their_map_agree():
    assert sorted(ckpt_harness.__all__) == sorted(ckpt_harness._EXPORTS)


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        ckpt_harness.nope  # noqa: B018
    with pytest.raises(ImportError):
        exec("from ckpt_harness import nope", {})


def test_every_builtin_job_is_preloaded_by_the_warm_parent():
    """Its ranks, forks of the warm parent, find the job's module imported
    instead of importing it again each (a deepspeed rank would also run
    DeepSpeed's warm-up again: 0.8-1.0 s per rank, docs/speed.md)."""
    import importlib

    from ckpt_harness.jobs import BUILTIN_JOBS

    for name, ref in BUILTIN_JOBS.items():
        module, _, cls = ref.partition(":")
        try:
            job = getattr(importlib.import_module(module), cls)
        except ImportError:  # its framework is not installed here: it never runs
            continue
        assert job.preload[-1] == module, (name, job.preload)
