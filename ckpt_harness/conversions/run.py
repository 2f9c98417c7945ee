"""One conversion, run in a process of its own with a deadline.

A conversion imports its framework (DeepSpeed, transformers: seconds) and
may hang or crash like any code under test, so it runs in a fresh
interpreter, in its own session: the harness stays light, a deadline kills
it and whatever it started, and a hang leaves every thread's stack
(`faulthandler`, a second before the deadline) in its log. The child writes
what it found to a result file: the converted state captured
(`state.capture`), or the refusal or failure it met, with the traceback;
and, asked for the truth of a target without a full state, the source
save as its own loader reads it (`Conversion.read_source`), read first.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import pickle
import subprocess
import sys
from pathlib import Path
from typing import Optional

from ckpt_harness.launch import _proc
from ckpt_harness.state import Record

#: How the conversion's process exits when the harness's part of it failed.
HARNESS_EXIT = 3


@dataclasses.dataclass(frozen=True)
class Converted:
    """What one conversion of save k gave; exactly one of the first six is set."""

    #: The converted checkpoint, read back, captured.
    state: Optional[Record] = None
    #: The conversion raised: it refused (allowed), in its words.
    refused: Optional[str] = None
    #: It wrote something its reader could not load.
    unreadable: Optional[str] = None
    #: It wrote something the harness has no reader for (`conversions.NoReader`).
    no_reader: Optional[str] = None
    #: It did not finish, or its process died: what is known, and the log's tail (stacks).
    broken: Optional[str] = None
    #: It never ran: it could not import what it needs, or the harness failed
    #: around it (`HARNESS_EXIT`); or the save itself did not load as its
    #: layout (a wrong `--checkpoint-layout`?). Nothing was judged.
    error: Optional[str] = None
    details: str = ""
    #: The source save, read by `Conversion.read_source`, captured (when asked).
    source: Optional[Record] = None


def run_conversion(name: str, source: Path, workdir: Path, deadline: float, *, read_source: bool = False) -> Converted:
    """Run conversion `name` of the save in `source` into `workdir/out`;
    with `read_source`, read the save itself first (`Converted.source`)."""
    workdir, source = workdir.resolve(), source.resolve()  # the child runs in `workdir`
    out, result, log_path = workdir / "out", workdir / "result.pkl", workdir / "conversion.log"
    out.mkdir(parents=True)
    # Our import path, the current directory ("") spelled out: the child runs in `workdir`.
    path = os.pathsep.join(p or os.getcwd() for p in sys.path)
    child_env = {**os.environ, "PYTHONPATH": path}
    argv = [sys.executable, "-m", "ckpt_harness.conversions", name, str(source), str(out), str(result),
            str(deadline), "source" if read_source else "-"]
    with open(log_path, "wb") as log:
        proc = _proc.Child(argv, env=child_env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                           cwd=workdir, start_new_session=True,
                           preexec_fn=functools.partial(_proc.die_with_parent, os.getpid()))
        timed_out = False
        try:
            proc.wait(timeout=deadline)
        except BaseException as exc:  # the deadline, or Ctrl-C: the conversion and what it started go
            _proc.kill_group(proc.pid)
            proc.reap()
            if not isinstance(exc, subprocess.TimeoutExpired):
                raise
            timed_out = True
    tail = log_path.read_text(errors="replace")[-4000:]
    if timed_out:
        return Converted(broken=f"the conversion did not finish in {deadline:.0f}s", details=tail)
    if result.exists():
        with open(result, "rb") as f:
            return pickle.load(f)
    if proc.returncode < 0:
        return Converted(broken=f"the conversion's process died by signal {-proc.returncode}", details=tail)
    if proc.returncode == HARNESS_EXIT:
        last = tail.strip().splitlines()[-1] if tail.strip() else f"exit {HARNESS_EXIT}"
        return Converted(error=f"the harness failed in the conversion's process: {last}", details=tail)
    return Converted(broken=f"the conversion's process exited {proc.returncode} without a result", details=tail)
