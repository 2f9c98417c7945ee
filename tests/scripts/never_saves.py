"""A torchrun script that trains and never saves: it ignores its output
directory argument (the newcomer's script that wrote to a path of its own).
There is nothing to judge, which `run --script` must say, not PASS. Given
a second directory, it saves its weights there instead (where it wrote is
what the report tells).

    never_saves.py OUT [ELSEWHERE]
"""

import sys
from pathlib import Path

import torch
import torch.distributed as dist

dist.init_process_group("gloo")
torch.manual_seed(dist.get_rank())
weight = torch.zeros(4)
for _ in range(3):
    grad = torch.randn(4)
    dist.all_reduce(grad)
    weight -= 0.1 * grad
if len(sys.argv) > 2:
    Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
    torch.save(weight, Path(sys.argv[2]) / f"weights_{dist.get_rank()}.pt")
print(f"trained; output directory {sys.argv[1]} left alone")
dist.destroy_process_group()
