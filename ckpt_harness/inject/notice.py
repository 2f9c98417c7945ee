"""A preemption with notice, as a scheduler gives one: SIGTERM, then SIGKILL after a grace.

Slurm (`scancel`, a job reaching its time limit, a node drained) signals
every process of the job with SIGTERM and sends SIGKILL `KillWait` seconds
later; Kubernetes sends SIGTERM to the container and SIGKILL after
`terminationGracePeriodSeconds`; torchrun's agent, told to stop, forwards
SIGTERM to its workers and kills what is left after its shutdown timeout.
Both schedulers default to 30 seconds. A trainer's SIGTERM handler often
spends them writing an emergency checkpoint, and the grace running out
halfway through that write is the case this fault exists for: the resume
must then find the emergency save complete or the checkpoint before it
intact, never half a file taken for a checkpoint.

The rank where the fault fires plays the scheduler, right before the
operation it is armed at:

1. it SIGTERMs its peers (found through their beacons, `launch.beacon`,
   each named by a pidfd: never a pid some stranger took over since), so
   that they get theirs wherever they are at the moment the case names, as
   a scheduler's notice reaches every process of a job at nearly one
   moment; not after the reaper's fork and exec (milliseconds, tens on a
   loaded machine), through which a peer ran on: whether DeepSpeed's rank 0
   had written `latest` by then decided a case's verdict (`docs/speed.md`,
   "A preemption notice that came a fork late");
2. it starts the *reaper*, a small process (no torch) holding those
   pidfds and its own, which sleeps until the grace counted from the
   notice is over and SIGKILLs whichever of them is still alive;
3. it SIGTERMs itself, so that its own handler (or SIGTERM's default
   action, death) comes before the operation, at the point the case names.

What it cannot avoid changing: the rank forks the reaper (its pidfds are
closed in the rank at once) and is its parent, so a rank that lives through
the grace has one more child, which exits after the grace. The reaper stays
in the rank's process group and session and keeps its environment, so the
harness's teardown (a Job rank's process group, a torchrun run's tag) ends
it with the run; a harness killed outright leaves it to run out its grace,
then exit.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from ckpt_harness.launch import beacon

#: The reaper, run as `python -I -S -c REAPER UNTIL FD...`: the pidfds it inherited, SIGKILLed once the
#: monotonic clock (one clock for every process of the machine) reads UNTIL.
REAPER = """
import signal, sys, time
fds = [int(fd) for fd in sys.argv[2:]]
time.sleep(max(0.0, float(sys.argv[1]) - time.monotonic()))
for fd in fds:
    try:
        signal.pidfd_send_signal(fd, signal.SIGKILL)
    except ProcessLookupError:
        pass
"""


def deliver(grace: float) -> None:
    """Give every rank of this rank's group its notice: SIGTERM now (this
    process last), SIGKILL `grace` seconds from now to any still alive. A
    process a rank spawned that joined it (DCP's checkpoint process) gives
    it to the ranks and to itself; one that knows no group, to itself only."""
    me = os.getpid()
    pids = beacon.group_pids(int(os.environ.get("WORLD_SIZE", "1"))) or {}
    peers = []
    for pid in pids.values():
        if pid != me:
            try:
                peers.append(os.pidfd_open(pid))
            except ProcessLookupError:  # a peer already gone: nothing to signal
                pass
    mine = os.pidfd_open(me)
    try:
        until = time.monotonic() + grace
        for fd in peers:
            try:
                signal.pidfd_send_signal(fd, signal.SIGTERM)
            except ProcessLookupError:
                pass
        subprocess.Popen([sys.executable, "-I", "-S", "-c", REAPER, repr(until), *map(str, [*peers, mine])],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         pass_fds=[*peers, mine])
    finally:
        for fd in [*peers, mine]:
            os.close(fd)
    os.kill(me, signal.SIGTERM)
