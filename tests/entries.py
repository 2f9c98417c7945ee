"""Launcher entry points for the launcher's own tests (no Job involved)."""

import os
import signal
import subprocess
import time
from pathlib import Path

import torch
import torch.distributed as dist


def all_reduce(info, payload):
    t = torch.ones(1)
    dist.all_reduce(t)
    Path(info.run_dir, f"sum{info.rank}").write_text(str(int(t.item())))


def rank0_barrier(info, payload):
    if info.rank == 0:
        dist.barrier()


def rank1_sigkill(info, payload):
    if info.rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    dist.barrier()


def rank1_raises(info, payload):
    if info.rank == 1:
        raise ValueError("planted failure on rank 1")
    dist.barrier()


def spawn_sleeper_and_hang(info, payload):
    child = subprocess.Popen(["sleep", "1000"])
    Path(info.run_dir, f"child{info.rank}").write_text(str(child.pid))
    time.sleep(1000)


def hang_forever(info, payload):
    Path(info.run_dir, f"started{info.rank}").write_text(str(os.getpid()))
    time.sleep(1000)
