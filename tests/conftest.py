"""Fixtures shared by the real-process tests."""

import pytest
from _pytest import pytester

from tests.pace import Pace, measure

#: Modules an in-process pytester run keeps once it imported them. Pytester
#: drops, after each run, the modules the run imported, and torch (its C
#: extension, the operators and pytree nodes its modules register) cannot
#: be imported a second time in one process. Kept, they are shared with the
#: test process, as its warm fork server is: an inner run costs its own work
#: only, not an interpreter, a torch import and a fork server of its own.
KEPT = ("zope", "readline", "torch", "numpy", "ckpt_harness", "tests", "deepspeed", "transformers", "accelerate",
        "safetensors", "huggingface_hub", "tokenizers", "sympy", "mpmath", "networkx", "jinja2", "filelock",
        "fsspec", "typing_extensions", "einops", "psutil", "hjson", "pydantic", "py_cpuinfo", "cpuinfo", "yaml",
        "regex", "tqdm", "packaging", "requests", "urllib3", "charset_normalizer", "idna", "certifi")


def _keeping_snapshot(self) -> pytester.SysModulesSnapshot:
    return pytester.SysModulesSnapshot(preserve=lambda name: name.startswith(KEPT))


pytester.Pytester._Pytester__take_sys_modules_snapshot = _keeping_snapshot


@pytest.fixture
def pace(tmp_path_factory) -> Pace:
    """This machine's slowdown right now, measured just before the test times anything."""
    return measure(tmp_path_factory.mktemp("pace"))


#: Seconds each module's tests took in all, measured by `pytest -n 3 --junitxml`
#: on the 2-core machine kind (2026-11-25, other work on the box). Used only to
#: hand out the longest modules first: with xdist's `load` scheduling, a module
#: of torchrun runs started last is a tail one worker runs alone while the
#: others idle.
MEASURED = {
    "test_plugin": 553, "test_script_mode": 521, "test_explore": 395, "test_setup_errors": 319, "test_cli": 291,
    "test_script_frameworks": 232, "test_elastic": 227, "test_verify": 173, "test_script_explore": 147,
    "test_scenarios": 131, "test_extension": 122, "test_script_matrix": 121, "test_launch": 99,
    "test_async_process": 95, "test_async_saves": 63, "test_matrix_shards": 180, "test_early_end": 40,
    "test_deepspeed_job": 54, "test_frozen_ranks": 46,
}


def pytest_collection_modifyitems(items):
    items.sort(key=lambda item: -MEASURED.get(item.path.stem, 0))  # stable: in-module order is kept
