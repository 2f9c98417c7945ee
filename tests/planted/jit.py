"""Builders of planted JIT ops (`ckpt_harness.jit`): slow, failing, or
starting a compiler-like child that must die with them."""

import os
import subprocess
import time


def build() -> None:
    """Take `CKPT_TEST_BUILD_SECONDS`, leaving what torch's builder leaves."""
    time.sleep(float(os.environ["CKPT_TEST_BUILD_SECONDS"]))


def fail() -> None:
    raise RuntimeError("gcc: fatal error: shm.cpp: No such file or directory")


def hang_with_child() -> None:
    """A build that never ends, with a child of its own (as ninja starts gcc);
    writes the child's pid where the test can find it."""
    child = subprocess.Popen(["sleep", "600"])
    with open(os.environ["CKPT_TEST_CHILD_PID"], "w") as f:
        f.write(str(child.pid))
    time.sleep(600)
