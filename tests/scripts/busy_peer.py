"""Rank 1 raises while rank 0 is busy outside any collective (a sleep here):
the agent stops rank 0 at once, wherever it is."""

import time

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("planted failure on rank 1")
time.sleep(1000)  # rank 0 is here when the agent stops it
