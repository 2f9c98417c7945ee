"""A torchrun script that trains and never saves: it ignores its output
directory argument (the newcomer's script that wrote to a path of its own).
There is nothing to judge, which `run --script` must say, not PASS."""

import sys

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
weight = torch.zeros(4)
for _ in range(3):
    grad = torch.randn(4)
    dist.all_reduce(grad)
    weight -= 0.1 * grad
print(f"trained; output directory {sys.argv[1]} left alone")
dist.destroy_process_group()
