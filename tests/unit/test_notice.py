"""A preemption notice reaches the peers before the rank that gives it does
anything else (`inject.notice.deliver`): they get it wherever they are at the
point the case names, not a fork and exec later (starting the reaper), which
let DeepSpeed's rank 0 write `latest` in some runs and not in others.

Real processes: a peer that SIGTERM kills, and `deliver` in a forked child
(whose own notice ends it). The reaper's start is where the test looks (it
is not started: nothing is left to kill): the peer must be dead by then.
Against the order before (reaper first) the peer is still alive there, and
the test fails.
"""

import os
import select
import signal
import subprocess
import sys

from ckpt_harness.inject import notice
from ckpt_harness.launch import beacon

#: How long the peer may take to die of a SIGTERM already sent: a kernel's signal delivery, even on a loaded box.
DEATH = 10.0


def _dead_within(pidfd: int, seconds: float) -> bool:
    return bool(select.select([pidfd], [], [], seconds)[0])


def test_the_peers_are_signalled_before_the_reaper_is_started(monkeypatch):
    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    read_fd, write_fd = os.pipe()
    try:
        child = os.fork()
        if child == 0:  # the rank that gives the notice; its own SIGTERM ends it
            os.close(read_fd)
            try:
                signal.signal(signal.SIGTERM, signal.SIG_DFL)  # as a rank has it, whatever the test runner set
                watched = os.pidfd_open(peer.pid)
                monkeypatch.setattr(beacon, "group_pids", lambda world_size: {0: peer.pid, 1: os.getpid()})

                def reaper(args, **kwargs):  # not started: nothing is left to kill once the test ends
                    os.write(write_fd, b"dead" if _dead_within(watched, DEATH) else b"alive")

                monkeypatch.setattr(notice.subprocess, "Popen", reaper)
                notice.deliver(0.5)
            finally:
                os._exit(3)  # deliver returned: its SIGTERM to itself did not end it
        os.close(write_fd)
        with os.fdopen(read_fd, "rb") as said:
            seen = said.read()
        _, status = os.waitpid(child, 0)
        assert seen == b"dead", "the peer was still running when the reaper was started: the notice came after it"
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM, status
        assert peer.wait(DEATH) == -signal.SIGTERM
    finally:
        peer.kill()
        peer.wait()
