"""The suite's own guard: a test that never ends is ended, with every
thread's stack (`tests/conftest.py`, `TEST_DEADLINE`), even where no Python
code can run any more; one that ends in time is not touched."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run(tmp_path: Path, body: str) -> tuple[subprocess.CompletedProcess, float]:
    (tmp_path / "test_one.py").write_text(textwrap.dedent(body))
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.conftest",
                           "--rootdir", str(tmp_path), str(tmp_path / "test_one.py")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "CKPT_TEST_DEADLINE": "3", "PYTHONPATH": str(ROOT)})
    return done, time.monotonic() - started


def test_a_test_that_never_ends_is_ended_with_its_stack_and_one_that_ends_is_not(tmp_path):
    # the main thread waits for good on a lock no one releases (a test that hangs, not one that fails)
    hung, took = run(tmp_path, """
        import threading

        def test_waits_for_good():
            lock = threading.Lock()
            lock.acquire()
            lock.acquire()
    """)
    assert hung.returncode != 0 and took < 60, (hung.returncode, took, hung.stdout, hung.stderr)
    assert "Timeout" in hung.stderr and "test_waits_for_good" in hung.stderr, hung.stderr
    fine, _ = run(tmp_path, """
        import time

        def test_ends():
            time.sleep(0.1)
    """)
    assert fine.returncode == 0, fine.stdout + fine.stderr
