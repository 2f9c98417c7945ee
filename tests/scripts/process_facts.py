"""Write down what this process is, as a script run under torchrun sees it: one file per rank.

    python process_facts.py OUT_PREFIX

Standalone, as a user's script is. Besides the facts it leaves work for the
interpreter's exit: a file written and never closed, a non-daemon thread
still sleeping, and an atexit hook; the test reads what each left.
"""

import atexit
import json
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

out = sys.argv[1]
rank = int(os.environ["RANK"])


def parent_command() -> str:
    with open(f"/proc/{os.getppid()}/cmdline", "rb") as f:
        return " ".join(part.decode() for part in f.read().split(b"\0") if part)


def proc_environ() -> list:
    with open("/proc/self/environ", "rb") as f:
        return sorted(entry.decode(errors="replace") for entry in f.read().split(b"\0") if b"=" in entry)


facts = {
    "argv": sys.argv, "orig_argv": sys.orig_argv, "path": sys.path, "cwd": os.getcwd(),
    "main_file": sys.modules["__main__"].__file__, "name": __name__,
    "main_globals": sorted(k for k in vars(sys.modules["__main__"]) if k.startswith("__")),
    "env": dict(os.environ), "proc_environ": proc_environ(),
    "flags": list(sys.flags), "threads": torch.get_num_threads(), "interop_threads": torch.get_num_interop_threads(),
    "signals": {int(s): str(signal.getsignal(s)) for s in signal.valid_signals()
                if s not in (signal.SIGKILL, signal.SIGSTOP)},
    "mask": sorted(int(s) for s in signal.pthread_sigmask(signal.SIG_BLOCK, [])),
    "fds": sorted(int(fd) for fd in os.listdir("/proc/self/fd")),
    "leads_session": os.getsid(0) == os.getpid(), "leads_group": os.getpgid(0) == os.getpid(),
    "parent": parent_command(), "live_threads": threading.active_count(),
    "dist_initialized": dist.is_initialized(),
}
with open(f"{out}.{rank}.json", "w") as f:
    json.dump(facts, f, indent=1, sort_keys=True)

unclosed = open(f"{out}.{rank}.unclosed", "w")  # noqa: SIM115  left to the interpreter's exit
unclosed.write("flushed at exit\n")
atexit.register(lambda: open(f"{out}.{rank}.atexit", "w").write("ran\n"))


def late() -> None:
    time.sleep(0.5)
    with open(f"{out}.{rank}.thread", "w") as f:
        f.write("joined\n")


threading.Thread(target=late).start()
