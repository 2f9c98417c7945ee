"""Fixtures shared by the real-process tests."""

import tempfile

import pytest
from _pytest import pytester

from ckpt_harness.plugin import group_in_node_id
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


@pytest.fixture(scope="session", autouse=True)
def _system_temp_in_basetemp(tmp_path_factory):
    """The system temporary directory of the suite's runs, in-process and
    in subprocesses alike, is one under pytest's base temp: a failing run
    keeps its work directory there by design (the CLI prints its path), and
    the planted bugs make many fail; pytest prunes old base temps, /tmp no one."""
    systemp = tmp_path_factory.mktemp("systemp", numbered=False)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TMPDIR", str(systemp))
        mp.setattr(tempfile, "tempdir", str(systemp))
        yield


@pytest.fixture
def pace(tmp_path_factory) -> Pace:
    """This machine's slowdown right now, measured just before the test times anything."""
    return measure(tmp_path_factory.mktemp("pace"))


#: Seconds each module's tests took in all, measured by `make test` with
#: `--junitxml` on the 2-core machine kind (2026-11-26, the suite alone on the
#: box; test_script_settings, test_script_frameworks and test_script_explore by
#: `--durations` on 2026-11-27, with the tests added then: Lightning's and
#: the kept best checkpoint's in the second session). Used only to
#: hand out the longest modules first, so that the end of the run is short
#: tests that fill the workers evenly, not a module of torchrun runs one
#: worker runs alone while the others idle (a module missing here goes last).
#: `python ci/module_times.py junit.xml` prints the table from a run's JUnit XML.
MEASURED = {
    "test_explore": 261, "test_script_mode": 243, "test_extension": 162, "test_plugin": 130, "test_verify": 123,
    "test_script_settings": 130, "test_script_frameworks": 250, "test_elastic": 84, "test_cli": 72,
    "test_matrix_shards": 70, "test_scenarios": 65, "test_script_matrix": 57, "test_reduction": 57, "test_launch": 53,
    "test_async_process": 36,
    "test_deepspeed_job": 32, "test_jit": 29, "test_script_explore": 65, "test_async_saves": 27,
    "test_setup_errors": 21, "test_checkpointers": 21, "test_conversions": 50, "test_frozen_ranks": 16,
    "test_script_launch": 15, "test_background_writers": 600, "test_preemption": 110, "test_warm_starts": 40,
    "test_baseline_causes": 60, "test_warm_workers": 60, "test_inline_save": 25,
    "test_flake": 70, "test_severity": 25, "test_ci_output": 25,
    "test_storage": 90,  # 2026-11-29, by --durations, the module alone on the box
}


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook reads the marks into node ids
def pytest_collection_modifyitems(items):
    """Longest modules first; the tests of a module that share one of its
    module-scoped fixtures kept on one worker (`--dist loadgroup`).

    xdist's `load` hands each worker a run of consecutive items at first (a
    quarter of its share), so sorted longest first, one worker got the three
    longest modules while the others drained the short ones and idled; and a
    module fixture (a shared torchrun verification, a matrix, a pip install)
    was made again on every worker its tests reached. Under `loadgroup` a
    test that shares nothing is a unit of its own, handed out one at a time
    as workers free up (longest first: a list schedule), and the tests that
    share a module's fixture are one unit, so it is made once.
    """
    items.sort(key=lambda item: -MEASURED.get(item.path.stem, 0))  # stable: in-module order is kept
    for item in items:
        if any(defs[-1].scope in ("module", "class") and defs[-1].baseid == item.nodeid.partition("::")[0]
               for defs in item._fixtureinfo.name2fixturedefs.values() if defs):
            item.add_marker(pytest.mark.xdist_group(item.path.stem))
            group_in_node_id(item, item.path.stem)
