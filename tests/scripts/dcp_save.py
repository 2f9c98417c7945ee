"""Every rank saves its shard with torch.distributed.checkpoint, imported
only here (after the bootstrap ran), into OUT/step_2 and OUT/step_4; then
writes which frameworks were imported by then.

    dcp_save.py OUT
"""

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
import torch.distributed.checkpoint as dcp  # noqa: E402  (late on purpose: the import hook must catch it)

weight = torch.full((4,), float(rank))
for step in (2, 4):
    weight += 1
    dcp.save({f"w{rank}": weight}, checkpoint_id=str(out / f"step_{step}"))
frameworks = ("transformers", "deepspeed", "lightning", "pytorch_lightning", "accelerate")
(out / f"imported{rank}.json").write_text(json.dumps([m for m in frameworks if m in sys.modules]))
dist.destroy_process_group()
