"""Fixtures shared by the real-process tests."""

import faulthandler
import os
import sys
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


#: Seconds any one test may take before its process is ended with every thread's stack: about 5x the
#: longest a test took in a CI run (186 s, test_extension's CLI test, three workers on two cores, 2026-11-30;
#: 155 s with a whole matrix beside the suite), never reached by one that works.
TEST_DEADLINE = float(os.environ.get("CKPT_TEST_DEADLINE", 900))


_STDERR = pytest.StashKey[int]()


def pytest_configure(config):
    # the process's own stderr, taken while pytest's capture is suspended (a test's fd 2 is the capture's)
    config.stash[_STDERR] = os.dup(sys.__stderr__.fileno())


@pytest.fixture(autouse=True)
def _test_deadline(request):
    """Every test ends. faulthandler's watchdog is a C thread: it fires even
    where no Python code can run any more (a thread deadlocked holding the
    GIL, python/cpython#106883, froze a CI run once), writes every thread's
    stack to the process's own stderr and ends the process, which xdist
    reports as the test that crashed it."""
    faulthandler.dump_traceback_later(TEST_DEADLINE, exit=True, file=request.config.stash[_STDERR])
    yield
    faulthandler.cancel_dump_traceback_later()


@pytest.fixture(autouse=True)
def _agent_servers_of_a_pytester_run_go_with_it(request):
    """A torchrun agent server started inside a pytester run imported torch under that run's
    environment (pytester's own HOME, the test's PYTHONPATH); it stays in the test process. Every later
    script run there then differs from it, so each of its workers starts cold, saying why
    ("worker started cold: HOME differ ..."), and a later test that proves a warm start fails
    (`test_warm_workers.py`'s, after `test_extension.py`'s plugin run on the same xdist worker). So
    the servers a pytester test started are stopped after it; those it found keep running."""
    if "pytester" not in request.fixturenames:
        yield
        return
    from ckpt_harness.launch import agent

    found = agent.running()
    yield
    agent.shutdown(keep=found)


@pytest.fixture
def pace(tmp_path_factory) -> Pace:
    """This machine's slowdown right now, measured just before the test times anything."""
    return measure(tmp_path_factory.mktemp("pace"))


#: Seconds each module's tests took in all, measured by a clean-clone CI run
#: (`make test` with `PYTEST_ARGS=--junitxml=...`, the suite alone on the
#: 2-core box; the date and commit beside the table). Used only to
#: hand out the longest modules first, so that the end of the run is short
#: tests that fill the workers evenly, not a module of torchrun runs one
#: worker runs alone while the others idle (a module missing here goes last).
#: `python ci/module_times.py junit.xml` prints the table from a run's JUnit XML.
#: 2026-12-08: a clean clone of f1e20f7, `make test` without the `slow` tests (-n 3, 1499 passed in 18:38, the
#: suite alone on the box, `import torch` 1.1 CPU s here against 2.1-2.4 on 2026-12-07's); the modules it does
#: not run (`make test-trainers`'s, `slow` ones) from earlier runs.
MEASURED = {
    "test_background_writers": 299, "test_explore": 228, "test_extension": 196, "test_storage": 163,
    "test_script_mode": 151, "test_file_saves": 129, "test_warm_workers": 128, "test_script_explore": 127,
    "test_elastic": 103, "test_upgrades": 102, "test_cli": 98, "test_preemption": 92, "test_scenarios": 87,
    "test_async_process": 75, "test_conversions": 74, "test_plugin": 72, "test_script_settings": 70,
    "test_verify": 70, "test_inline_save": 66, "test_axes": 63, "test_matrix_shards": 61, "test_launch": 61,
    "test_consequence": 60, "test_async_saves": 60, "test_warm_starts": 53, "test_early_end": 50,
    "test_html_report": 46, "test_script_matrix": 38, "test_setup_errors": 27, "test_flake": 27,
    "test_reduction": 24, "test_stops_anywhere": 22, "test_deepspeed_job": 21, "test_relocation": 21,
    "test_jit": 20, "test_case_budget": 20, "test_resume_chain": 19, "test_ci_output": 19, "test_timelines": 19,
    "test_action": 18, "test_frozen_ranks": 17, "test_examples": 16, "test_findings": 16, "test_envs": 14,
    "test_matrix_rows": 13, "test_checkpointers": 12, "test_s3server": 11, "test_save_neutral": 10,
    "test_capability_mix": 9, "test_hf_trainer_job": 9, "test_severity": 8, "test_baseline_causes": 8,
    "test_timings": 8, "test_suite_deadline": 7, "test_deepspeed_reshard": 6, "test_write_conflicts": 5,
    "test_script_launch": 5, "test_buffering_bugs": 5,
    "test_script_frameworks": 909, "test_run_identity": 137,
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
