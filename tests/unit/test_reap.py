"""A child the harness kills is reaped, whatever state an interrupted `Popen.wait` left it in."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from ckpt_harness.launch import _proc


def test_a_killed_child_is_reaped_even_with_the_popen_lock_left_held():
    """A Ctrl-C inside `Popen.wait(timeout)`, between its acquire of the Popen's waitpid lock and the `try` that
    releases it, leaves the lock held: a build's cleanup then slept on it for good in a clean clone's run (its
    pip killed, never reaped). `Child.reap` waits with `os.waitpid`, whatever the lock's state."""
    proc = _proc.Child([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
    assert proc._waitpid_lock.acquire(False)  # as the interrupted wait left it
    os.killpg(proc.pid, signal.SIGKILL)
    done = threading.Thread(target=proc.reap, daemon=True)
    done.start()
    done.join(timeout=30)
    assert not done.is_alive() and proc.returncode == -signal.SIGKILL, proc.returncode
    assert not Path(f"/proc/{proc.pid}").exists(), "reaped, not left a zombie"
    proc.reap()  # once more, as a second cleanup would: nothing left to wait for


def test_every_child_the_harness_kills_and_waits_for_is_reapable():
    """Each place that kills a child of its own and then waits for it (a build, a JIT op, a conversion, the
    object-store server, the fork and agent servers) starts it as a `Child`; a plain `Popen` there would bring
    the hang back. Read from the source, so a new such site is caught where it is written."""
    root = Path(_proc.__file__).resolve().parent.parent
    plain = [f"{path.relative_to(root)}:{n}" for path in sorted(root.rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if "subprocess.Popen(" in line and not line.lstrip().startswith(("#", "*"))]
    # What is left: the Action's harness process (waited for, never killed) and the notice's reaper (detached).
    assert [p.split(":")[0] for p in plain] == ["inject/notice.py", "present/action.py"], plain


def test_a_plain_popen_would_hang_where_child_does_not():
    """The race `Child` is for, shown on a plain `Popen`: with the lock held its `wait()` does not return."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    assert proc._waitpid_lock.acquire(False)
    waited = threading.Thread(target=proc.wait, daemon=True)
    waited.start()
    waited.join(timeout=2)
    try:
        assert waited.is_alive(), "Popen.wait returned with its lock held: the race is gone from this Python"
    finally:
        proc._waitpid_lock.release()  # the wait goes on and reaps it: no thread is left behind
        waited.join(timeout=30)
    assert not waited.is_alive() and proc.returncode == 0


def _server(code: str):
    """A child at the other end of a socket pair, running `code` with the socket as `s`."""
    import socket

    ours, theirs = socket.socketpair()
    proc = _proc.Child([sys.executable, "-c", f"import socket, sys, time; s = socket.socket(fileno={theirs.fileno()}); "
                        + code], pass_fds=[theirs.fileno()], start_new_session=True)
    theirs.close()
    return ours, proc


def test_a_server_asked_to_shut_down_exits_and_one_that_does_not_is_killed_and_reaped():
    """`_wire.shut_down`, how the fork server and the agent server end: asked, it exits; deaf, it is
    killed after the wait, and reaped."""
    from ckpt_harness.launch import _wire

    sock, obeys = _server("s.recv(1 << 16); sys.exit(0)")
    _wire.shut_down(sock, obeys, wait=30)
    assert obeys.returncode == 0
    sock, deaf = _server("time.sleep(60)")
    _wire.shut_down(sock, deaf, wait=0.5)
    assert deaf.returncode == -signal.SIGKILL and not Path(f"/proc/{deaf.pid}").exists()
