"""Rank 1 raises; rank 0 goes on to a barrier with it (and fails when rank 1 is gone)."""

import torch.distributed as dist

dist.init_process_group("gloo")
if dist.get_rank() == 1:
    raise RuntimeError("planted failure on rank 1")
dist.barrier()
