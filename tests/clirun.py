"""`ckpt-harness ARGS` run inside the test process, for tests of its output and exit codes.

A subprocess costs an interpreter, a torch import (the job's module) and a
warm fork server of its own: seconds of CPU each, which on the 2-core
machine add up to minutes of the suite. `cli.main(ARGS)` in this process
runs the same command on the test process's fork server. What only a real
process shows (the console script's sys.path, a pipe for stderr, signals,
the temporary directory a child is given, a repro line's PYTHONPATH) stays
with tests that start one.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
from pathlib import Path
from typing import Mapping, Optional, Union


@dataclasses.dataclass(frozen=True)
class Finished:
    """What `subprocess.run(..., capture_output=True, text=True)` gives, for the same assertions."""

    returncode: int
    stdout: str
    stderr: str


def cli(*args: str, cwd: Union[str, Path], env_extra: Optional[Mapping[str, str]] = None,
        timeout: Optional[float] = None) -> Finished:
    """`python -m ckpt_harness.cli ARGS` in `cwd`, with `env_extra` set (its
    PYTHONPATH put first on sys.path, as the interpreter would), in this
    process; sys.path, the environment and the directory are restored after.
    `timeout` is the subprocess helpers' and is not needed here: every run
    of the command has a deadline of its own."""
    from ckpt_harness.cli import main

    extra = dict(env_extra or {})
    paths = [p for p in extra.pop("PYTHONPATH", "").split(os.pathsep) if p]
    saved_env = {name: os.environ.get(name) for name in extra}
    saved_path, saved_cwd = sys.path[:], os.getcwd()
    out, err = io.StringIO(), io.StringIO()
    os.environ.update(extra)
    os.chdir(cwd)
    sys.path[:0] = [os.path.abspath(cwd), *paths]  # `python -m` puts the current directory first
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(list(args))
            except SystemExit as exc:  # argparse's usage errors
                code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
    finally:
        os.chdir(saved_cwd)
        sys.path[:] = saved_path
        for name, value in saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    return Finished(code, out.getvalue(), err.getvalue())
