"""Fail if any process of the harness outlived the test run.

Also an S3 server it started (`launch.s3server`: this environment's `weed`).

Ranks are forked from the warm fork server and keep its command line, so one
pattern finds the server and every rank it ever forked; script mode's torchrun
agents and workers name the harness's modules on theirs. Only servers of this
checkout's interpreter count (run this script with it): another checkout's
harness on the same machine is none of this run's business.
"""

import os
import sys
import time

PATTERNS = (b"ckpt_harness.launch.zygote", b"ckpt_harness.launch.agent", b"ckpt_harness.launch.worker")
WEED = os.path.join(os.path.dirname(sys.executable), "weed")


def survivors() -> list[str]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        argv0 = cmdline.split(b"\0", 1)[0].decode(errors="replace")
        ours = any(p in cmdline for p in PATTERNS) and argv0 == sys.executable
        if (ours or argv0 == WEED) and int(pid) != os.getpid():
            found.append(pid + ": " + cmdline.replace(b"\0", b" ").decode(errors="replace"))
    return found


if __name__ == "__main__":
    deadline = time.monotonic() + 5  # ranks being reaped right now may need a moment
    while (left := survivors()) and time.monotonic() < deadline:
        time.sleep(0.1)
    if left:
        print("ckpt_harness processes left running after the tests:", *left, sep="\n  ", file=sys.stderr)
        sys.exit(1)
    print("no ckpt_harness processes left running")
