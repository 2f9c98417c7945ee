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
#: 2026-12-07 (evening): a clean clone of ccaae50, `make test` without the `slow` tests (-n 3, 1475 passed and 1
#: failed, since fixed, in 49:46, with the Megatron-Core recipe's runs beside it: a load of 7-10), and the
#: trainers' two modules (`make test-trainers`) from a run of cc78e2a.
MEASURED = {
    "test_background_writers": 642, "test_storage": 551, "test_explore": 551, "test_script_mode": 523,
    "test_warm_workers": 516, "test_script_explore": 375, "test_scenarios": 318, "test_file_saves": 311,
    "test_plugin": 301, "test_consequence": 300, "test_extension": 297, "test_elastic": 291, "test_verify": 254,
    "test_conversions": 247, "test_cli": 233, "test_preemption": 229, "test_warm_starts": 218,
    "test_inline_save": 208, "test_matrix_shards": 204, "test_launch": 200, "test_reduction": 173,
    "test_async_process": 169, "test_script_settings": 133, "test_upgrades": 129, "test_axes": 109,
    "test_findings": 100, "test_html_report": 98, "test_async_saves": 97, "test_stops_anywhere": 95,
    "test_script_matrix": 80, "test_setup_errors": 75, "test_early_end": 65, "test_timelines": 61,
    "test_flake": 51, "test_action": 42, "test_case_budget": 41, "test_deepspeed_job": 38, "test_ci_output": 38,
    "test_resume_chain": 36, "test_checkpointers": 35, "test_relocation": 32, "test_jit": 31, "test_envs": 25,
    "test_baseline_causes": 24, "test_severity": 23, "test_matrix_rows": 23, "test_hf_trainer_job": 22,
    "test_frozen_ranks": 22, "test_save_neutral": 18, "test_examples": 17, "test_s3server": 16,
    "test_script_ops": 15, "test_script_launch": 14, "test_buffering_bugs": 14, "test_capability_mix": 14,
    "test_timings": 13, "test_deepspeed_reshard": 12, "test_opener": 12, "test_layers": 12,
    "test_suite_deadline": 12, "test_docs_site": 8, "test_warmups": 7, "test_safe_loading": 7, "test_faults": 6,
    "test_dcp_durability": 6, "test_write_conflicts": 6,
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
