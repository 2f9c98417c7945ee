"""Ops a framework compiles on first use, built before any deadline starts.

DeepSpeed's CPU comm op is built with gcc by the first process that needs
it: minutes on a cold machine. Built inside a rank, the build eats the run's
deadline, the run is cut, and the cut build leaves torch's `lock` file in the
build directory, so every later process waits on it until its own deadline:
every run of the job then fails, and none of it is the job's doing.

So a job names its JIT ops (`Job.jit_ops`), and before the first group of
that job is launched the harness builds each one in a process of its own,
with a progress line and a timeout of its own (`BUILD_TIMEOUT`), under a
`flock` that the kernel drops when the builder dies. Holding that lock, a
torch `lock` that no live process is working on is stale: it is removed,
and said so. Once built, a stamp next to the build records the versions it
was built for, so later harness processes check one file instead of
importing the framework.

A build that fails (or outlasts `BUILD_TIMEOUT`) steps aside: it is said,
with its reason, and the run starts anyway, the ranks building (or failing
to build) the op themselves as a user's processes would, so that what the
harness prepares never turns into a verdict of the run (issue 64). It is
not tried again in this process.

Torch-free: this runs in the harness process.
"""

from __future__ import annotations

import dataclasses
import fcntl
import functools
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Mapping, Sequence

from ckpt_harness.errors import HarnessError
from ckpt_harness.launch import _proc

#: How long one build may take. gcc on 2 busy cores needs a few minutes;
#: this only stops a build that is wedged.
BUILD_TIMEOUT = 1200.0
#: A torch `lock` younger than this may belong to a build that is just
#: starting (no compiler process yet): it is waited on, not removed.
LOCK_SETTLE = 30.0


class BuildFailed(HarnessError):
    """A JIT op could not be built: no run of the job can start."""


@dataclasses.dataclass(frozen=True)
class JitOp:
    """One op a framework compiles on first use."""

    #: For the progress line: "DeepSpeed's CPU comm op".
    what: str
    #: torch's build directory of the op (`TORCH_EXTENSIONS_DIR/<name>`).
    build_dir: Path
    #: "module:function" that loads the op, building it if needed; run in a
    #: process of its own.
    builder: str
    #: What the built op depends on (framework and torch versions): a
    #: change rebuilds it.
    key: str
    #: Environment the builder needs (e.g. DS_ACCELERATOR=cpu).
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)

    @property
    def stamp(self) -> Path:
        return self.build_dir.parent / f".ckpt-harness-{self.build_dir.name}.built"

    @property
    def torch_lock(self) -> Path:
        return self.build_dir / "lock"

    def built(self) -> bool:
        """Stamped for this key, and the build is still there (an op the
        framework shipped prebuilt leaves no build directory: its stamp says so)."""
        try:
            stamp = self.stamp.read_text()
        except OSError:
            return False
        if self.torch_lock.exists():
            return False
        return stamp == self._stamp_text(prebuilt=True) or (stamp == self._stamp_text() and self.build_dir.is_dir())

    def _stamp_text(self, prebuilt: bool = False) -> str:
        return self.key + ("\n(prebuilt: no build directory)" if prebuilt else "")

    def write_stamp(self) -> None:
        self.stamp.write_text(self._stamp_text(prebuilt=not self.build_dir.is_dir()))


Say = Callable[[str], None]


def say(line: str) -> None:
    print(f"ckpt-harness: {line}", file=sys.stderr, flush=True)


#: (build dir, key) of the ops this process has checked.
_done: set[tuple[Path, str]] = set()
_lock = threading.Lock()


def ensure_built(ops: Sequence[JitOp], say: Say = say, timeout: float = BUILD_TIMEOUT) -> None:
    """Build every op of `ops` not built yet; once per op per process (threads wait for the first).
    One that cannot be built is said and left to the ranks (`build`)."""
    with _lock:
        for op in ops:
            if (op.build_dir, op.key) not in _done:
                if not op.built():
                    try:
                        build(op, say, timeout)
                    except Exception as exc:  # noqa: BLE001 - a warm-up never fails a run
                        say(f"warm-up skipped: {op.what} was not built before the run; the ranks build it "
                            f"themselves, inside their deadline, as a cold start would. Why: {exc}")
                _done.add((op.build_dir, op.key))


def build(op: JitOp, say: Say = say, timeout: float = BUILD_TIMEOUT) -> None:
    """Build `op` now (unless another process just did); `BuildFailed` if it cannot be."""
    op.build_dir.parent.mkdir(parents=True, exist_ok=True)
    with open(op.build_dir.parent / f".ckpt-harness-{op.build_dir.name}.flock", "w") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # another harness process building it: wait for it
        if op.built():
            return
        started = time.monotonic()
        _clear_stale_lock(op, say, started + timeout)
        say(f"building {op.what} (first use with these versions; can take minutes, done once) ...")
        _run_builder(op, started + timeout, timeout)
        op.write_stamp()
        say(f"built {op.what} in {time.monotonic() - started:.0f}s")


def _clear_stale_lock(op: JitOp, say: Say, until: float) -> None:
    """Wait out a build another process is doing; remove a lock nobody holds."""
    while op.torch_lock.exists():
        try:
            age = time.time() - op.torch_lock.stat().st_mtime
        except FileNotFoundError:
            return
        if age >= LOCK_SETTLE and not _working_in(op.build_dir):
            op.torch_lock.unlink(missing_ok=True)
            say(f"removed {op.torch_lock}: a stale build lock, left by a build that was interrupted")
            return
        if time.monotonic() > until:
            raise BuildFailed(f"{op.torch_lock} is held by a build that did not finish in time; "
                              "if no build is running, delete that file")
        time.sleep(1.0)


def _working_in(build_dir: Path) -> bool:
    """Is a live process (a compiler, ninja, a Python building) working in `build_dir`?"""
    target = str(build_dir.resolve())
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(proc / "cwd").startswith(target):
                return True
            if target.encode() in (proc / "cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


def _run_builder(op: JitOp, until: float, timeout: float) -> None:
    module, _, function = op.builder.partition(":")
    env = {**os.environ, **op.env, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    code = f"import importlib; importlib.import_module({module!r}).{function}()"
    with tempfile.TemporaryFile() as log:
        # Its own session, so that a timeout or Ctrl-C here kills the compilers
        # it started too; and it dies with us if we are SIGKILLed.
        proc = _proc.Child([sys.executable, "-c", code], env=env, stdout=log, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL, start_new_session=True,
                           preexec_fn=functools.partial(_proc.die_with_parent, os.getpid()))
        try:
            proc.wait(timeout=max(1.0, until - time.monotonic()))
        except BaseException:  # the timeout, or Ctrl-C: the compiler goes too, and its lock with it
            _proc.kill_group(proc.pid)
            proc.reap()
            op.torch_lock.unlink(missing_ok=True)
            if isinstance(sys.exc_info()[1], subprocess.TimeoutExpired):
                raise BuildFailed(f"building {op.what} took longer than {timeout:.0f}s; "
                                  f"see {op.build_dir}") from None
            raise
        if proc.returncode != 0:
            log.seek(0)
            tail = log.read().decode(errors="replace")[-3000:]
            raise BuildFailed(f"building {op.what} failed (exit {proc.returncode}):\n{tail}")
