"""Rank 1 skips a barrier that rank 0 waits in, and goes on to the next
all-reduce: each waits for the other for ever."""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank = dist.get_rank()
Path(sys.argv[1], f"started{rank}").write_text(str(os.getpid()))
if rank == 0:
    dist.barrier()  # rank 0 waits here
dist.all_reduce(torch.ones(1))
