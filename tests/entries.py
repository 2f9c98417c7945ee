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


def ddp_backward_vs_barrier(info, payload):
    """Rank 0's gradient all-reduce is issued by DDP's C++ reducer inside
    backward; rank 1 sits in a barrier instead."""
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4))
    for _ in range(2):  # DDP rebuilds its buckets in the second forward (a broadcast)
        model(torch.ones(2, 4)).sum().backward()
    if info.rank == 0:
        model(torch.ones(2, 4)).sum().backward()
    else:
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


def file_ops_with_fault(info, payload):
    """Write, fsync, rename and save under a checkpoint dir with probes armed;
    report what each call returned or raised to `result.json`."""
    import errno
    import json

    from ckpt_harness.inject import probes

    ckpt = Path(payload["ckpt"])
    ckpt.mkdir(parents=True, exist_ok=True)
    probes.install(str(Path(info.run_dir, f"rank{info.rank}.trace")), info.rank, ckpt_dir=str(ckpt),
                   faults=tuple(payload["faults"]), data_log=str(Path(info.run_dir, f"rank{info.rank}.data")))
    probes.set_phase("save 1")
    result = {}
    try:
        os.makedirs(ckpt / "step", exist_ok=True)
        with open(ckpt / "step" / "blob.tmp", "wb") as f:
            result["written"] = f.write(b"x" * 1000)
            os.fsync(f.fileno())
        os.replace(ckpt / "step" / "blob.tmp", ckpt / "step" / "blob")
        torch.save({"w": torch.ones(3)}, ckpt / "step" / "model.pt")  # a path: routed through open()
        with open(Path(info.run_dir) / "outside.txt", "w") as f:  # not under the checkpoint dir
            f.write("not traced")
    except OSError as exc:
        result["errno"] = errno.errorcode.get(exc.errno)
    result["finished"] = True
    Path(info.run_dir, "result.json").write_text(json.dumps(result))


def report_layout(info, payload):
    keys = ("RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK")
    Path(info.run_dir, f"layout{info.rank}").write_text(
        " ".join(os.environ[k] for k in keys) + f" {info.local_rank} {info.node}"
    )
