"""Rank 1 dies by SIGKILL in the first attempt only (a marker file remembers);
every rank writes which restart it finished in."""

import os
import signal
import sys
from pathlib import Path

import torch.distributed as dist

out = Path(sys.argv[1])
dist.init_process_group("gloo")
rank = dist.get_rank()
marker = out / "crashed"
if rank == 1 and not marker.exists():
    marker.write_text(str(os.getpid()))
    os.kill(os.getpid(), signal.SIGKILL)
dist.barrier()
(out / f"finished{rank}").write_text(os.environ["TORCHELASTIC_RESTART_COUNT"])
