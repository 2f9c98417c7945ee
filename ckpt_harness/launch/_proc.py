"""Process hygiene: children that die with their parent, groups that die together."""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys

_PR_SET_PDEATHSIG = 1


def die_with_parent(expected_parent: int) -> None:
    """Ask the kernel to SIGKILL us when our parent exits.

    This is what keeps ranks from outliving a harness that was itself
    SIGKILLed (no atexit, no finally runs then). The check after the prctl
    closes the race where the parent died before we asked.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # not Linux: fall back to the parent's cleanup
        pass
    if os.getppid() != expected_parent:
        os._exit(70)


def outlive_parent() -> None:
    """Undo `die_with_parent`: a process that now stands on its own (a
    spawned process outlives its parent until it notices the parent gone)."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pgid, sig)
    except OSError as exc:
        if exc.errno not in (errno.ESRCH, errno.EPERM):
            raise


class Child(subprocess.Popen):
    """A `Popen` that can be reaped after a kill whatever state an interrupted wait left it in.

    A Ctrl-C that lands inside `Popen.wait(timeout)` between its non-blocking
    acquire of the Popen's waitpid lock and the `try` that releases it leaves
    that lock held (CPython 3.11), and every later `wait()` sleeps on it for
    good: seen as a Ctrl-C'd build asleep on a futex, its pip killed and never
    reaped, in a clean clone's test run. Every cleanup that kills a child and
    then waits for it is the same race, so each reaps with `os.waitpid`.
    """

    def reap(self) -> None:
        """Wait for this child, just killed, and record how it ended."""
        if self.returncode is not None:
            return
        try:
            _, status = os.waitpid(self.pid, 0)
        except ChildProcessError:  # reaped already, by an interrupted wait
            return
        self.returncode = os.waitstatus_to_exitcode(status)


def describe_status(status: int) -> tuple[int | None, int | None]:
    """Split a waitpid status into (exit code, signal number)."""
    if os.WIFSIGNALED(status):
        return None, os.WTERMSIG(status)
    return os.waitstatus_to_exitcode(status), None


def redirect_output(path: "str | os.PathLike[str]") -> None:
    """Send this process's stdout and stderr, and Python's, line-buffered to `path`."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)


def alive(pid: int) -> bool:
    """Running, not a zombie waiting to be reaped."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(") ")[2][:1] not in ("Z", "X", "")
    except OSError:
        return False


def state(pid: int) -> str:
    """The process's state letter in /proc ("R", "S", "T", "Z"...); "" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rpartition(")")[2].split()[0]
    except (OSError, IndexError):
        return ""


def is_stopped(pid: int) -> bool:
    """Is the process stopped (SIGSTOP, SIGTSTP, or a tracer's stop)?"""
    return state(pid) in ("T", "t")
