"""Rank 1 skips a barrier that rank 0 waits in, and goes on to an all-reduce
that rank 0 never reaches: each waits for the other for ever. The all-reduce
is on a group of its own (its own gloo connections), so that gloo cannot
take rank 0's barrier messages for the all-reduce's and fail instead."""

import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
rank, other = dist.get_rank(), dist.new_group([0, 1])
Path(sys.argv[1], f"started{rank}").write_text(str(os.getpid()))
if rank == 0:
    dist.barrier()  # rank 0 waits here
dist.all_reduce(torch.ones(1), group=other)
