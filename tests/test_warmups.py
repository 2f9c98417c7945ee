"""Warm-ups that cannot fail a run (issue 64): what the harness prepares for a
framework (pre-imports, op builds) steps aside with a note where it cannot
be done, and the run is run and judged as usual. Real groups, real
DeepSpeed, real module files; `tests/unit/test_preimport.py` has the unit.
"""

import importlib.util
import os
import subprocess
import sys

import pytest

from ckpt_harness import Verdict
from tests.planted.warmups import ABSENT, FINE, RAISES


def test_a_job_whose_warm_ups_cannot_be_done_runs_and_is_judged(ckpt, tmp_path, monkeypatch, capsys):
    """The warm parent cannot import two of the job's preloads and its JIT op
    cannot be built: before issue 64 either was an ERROR before the job ran.
    Now each is a note, the module that can be pre-imported still is (its
    ranks check), and the golden run passes."""
    (tmp_path / "path").mkdir()
    (tmp_path / "path" / f"{RAISES}.py").write_text("raise ImportError('needs a newer framework')\n")
    (tmp_path / "path" / f"{FINE}.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path / "path"))  # the warm parent's path is the harness's
    monkeypatch.setenv("CKPT_TEST_JIT_DIR", str(tmp_path / "ext"))
    report = ckpt.verify("tests.planted.warmups:PreloadsWhatCannotBe", steps=2, cases=["golden"])
    assert report.verdict is Verdict.PASS, report.explain()
    err = capsys.readouterr().err
    assert f"warm-up skipped: pre-importing {ABSENT} (ModuleNotFoundError: No module named '{ABSENT}')" in err
    assert f"warm-up skipped: pre-importing {RAISES} (ImportError: needs a newer framework)" in err
    assert "warm-up skipped: the planted unbuildable op was not built before the run" in err
    assert "gcc: fatal error" in err  # the builder's own reason
    assert err.count(f"pre-importing {RAISES}") == 1  # said once, not once per run


@pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None, reason="deepspeed is not installed")
def test_deepspeeds_warm_up_skips_a_lazy_module_its_release_lacks(tmp_path):
    """The real warm-up on the installed DeepSpeed, given a lazy module of
    another release (as 0.19's list names `auto_ep_layer`, which 0.18 lacks):
    it is skipped with a note, and the one the release has is pre-imported.
    `make deepspeed-older` runs the whole thing on DeepSpeed 0.18 itself."""
    from ckpt_harness.jobs.deepspeed_job import DeepSpeedJob

    if not DeepSpeedJob.jit_ops()[0].built():
        pytest.skip("DeepSpeed's comm op is not built here (make .venv/.installed builds it; a build takes minutes)")
    other = "deepspeed.module_inject.auto_ep_layer_of_another_release"
    code = ("import sys\nfrom ckpt_harness.jobs.deepspeed_job import warm_deepspeed\n"
            f"warm_deepspeed(({other!r}, 'deepspeed.utils.pin_memory'))\n"
            "print('deepspeed.utils.pin_memory' in sys.modules)\n")
    env = {**os.environ, "DS_ACCELERATOR": "cpu", "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True"]
    assert f"warm-up skipped: pre-importing {other} (ModuleNotFoundError: No module named '{other}')" in out.stderr
