"""Rank 0 blocks for good, saying so first as an injected hang does; rank 1
then raises. On two nodes the failed node's agent exits and nothing is left
to happen: the blocked worker would sit there until the failure grace."""

import time

import torch.distributed as dist

from ckpt_harness.launch import rank

dist.init_process_group("gloo")
dist.barrier()
if dist.get_rank() == 0:
    rank.report_blocked()
    time.sleep(1000)
time.sleep(0.5)  # rank 0 has blocked
raise RuntimeError("planted failure on rank 1")
