"""Plain DDP over gloo whose saves go through every ordinary way of writing a file, none of them a path handed to
`torch.save`: what real scripts do, and what the harness must see as saves without being told.

Rank 0 writes save k into ``step_k.<ext>``, through the API the save's turn picks (`--apis`, round robin):

* file: ``with open(tmp, "wb") as f: torch.save(state, f); f.flush(); os.fsync(f.fileno())``, then
  ``os.replace(tmp, final)`` (the standard atomic save);
* buffer: `torch.save` into a `BytesIO`, whose bytes go through ``os.open``/``os.write``/``os.fsync``;
* pickle: ``pickle.dump`` into an open file;
* numpy: ``numpy.savez`` of every tensor (a zip written through ``io.open``);
* copy: `torch.save` to a staging directory outside the checkpoint directory, then ``shutil.copyfile`` in;
* tar: a ``tarfile`` holding the `torch.save`d state;
* json: ``json.dump`` of every tensor as a list of floats (exact: a float32 survives a double's repr);
* raw: the step and every tensor's bytes, concatenated, through ``os.write``: bytes no serializer saw.

and every save then points ``latest.json`` at it (``json.dump``, staged and renamed). Each file is
written to ``<name>.tmp``, fsynced, renamed into place and the directory fsynced, unless --in-place:
then straight into its final name, no fsync (a crash mid-write leaves a torn ``step_k`` that the next
start takes). Started again on a directory that holds saves, the script resumes from the newest one
it finds by listing them. Knows nothing of the harness.

    file_saves.py OUT [--steps N] [--save-every K] [--apis file,buffer,...] [--in-place] [--from-latest]
                      [--bug forget-momentum|stale-latest]

--from-latest resumes from the save ``latest.json`` names instead of the newest one listed (a `last`
pointer, as most frameworks keep one).

--bug forget-momentum resumes the model and step but leaves the optimizer's momentum as a fresh start
has it: a resume that silently skips the optimizer's state. --bug stale-latest refreshes ``latest.json``
on every other save only (the first, the third, ...), as a pointer a callback moves on some saves: with
--from-latest a run stopped after the second save, before the third, resumes from the first.
"""

import argparse
import io
import json
import os
import pickle
import re
import shutil
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

EXTENSIONS = {"file": "pt", "buffer": "bin", "pickle": "pkl", "numpy": "npz", "copy": "pt", "tar": "tar",
              "json": "json", "raw": "raw"}
parser = argparse.ArgumentParser()
parser.add_argument("out", type=Path)
parser.add_argument("--steps", type=int, default=4)
parser.add_argument("--save-every", type=int, default=2)
parser.add_argument("--apis", default=",".join(EXTENSIONS))
parser.add_argument("--in-place", action="store_true")
parser.add_argument("--from-latest", action="store_true")
parser.add_argument("--bug", choices=("forget-momentum", "stale-latest"))
args = parser.parse_args()
apis = args.apis.split(",")

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = DistributedDataParallel(torch.nn.Linear(8, 8))
optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def state(step):
    return {"model": model.module.state_dict(), "optimizer": optimizer.state_dict(), "step": step}


def tensors(step):
    """The state as flat named tensors (numpy, json)."""
    flat = {f"model.{k}": v for k, v in model.module.state_dict().items()}
    opt = optimizer.state_dict()
    flat.update({f"momentum.{i}": s["momentum_buffer"] for i, s in opt["state"].items()})
    return flat, step


def restore(flat, step):
    model.module.load_state_dict({k[6:]: torch.as_tensor(v) for k, v in flat.items() if k.startswith("model.")})
    params = list(model.parameters())
    for k, v in flat.items():
        if k.startswith("momentum.") and args.bug != "forget-momentum":
            optimizer.state[params[int(k[9:])]]["momentum_buffer"] = torch.as_tensor(v).clone()
    return step


def commit(final, write):
    """`write(path)` writes the file; atomically, unless --in-place."""
    if args.in_place:
        write(final)
        return
    tmp = final.with_name(final.name + ".tmp")
    write(tmp)
    os.replace(tmp, final)
    fd = os.open(final.parent, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def synced(f):
    f.flush()
    if not args.in_place:
        os.fsync(f.fileno())


def write_file(path, step):
    with open(path, "wb") as f:
        torch.save(state(step), f)
        synced(f)


def write_buffer(path, step):
    buffer = io.BytesIO()
    torch.save(state(step), buffer)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, buffer.getvalue())
        if not args.in_place:
            os.fsync(fd)
    finally:
        os.close(fd)


def write_pickle(path, step):
    with open(path, "wb") as f:
        pickle.dump(state(step), f)
        synced(f)


def write_numpy(path, step):
    flat, step = tensors(step)
    with open(path, "wb") as f:
        np.savez(f, step=np.int64(step), **{k: v.numpy() for k, v in flat.items()})
        synced(f)


def write_copy(path, step):
    staging = Path(tempfile.mkdtemp(prefix="file-saves-"))
    try:
        torch.save(state(step), staging / "state.pt")
        shutil.copyfile(staging / "state.pt", path)
    finally:
        shutil.rmtree(staging)


def write_tar(path, step):
    buffer = io.BytesIO()
    torch.save(state(step), buffer)
    member = tarfile.TarInfo("state.pt")
    member.size = buffer.tell()
    buffer.seek(0)
    with tarfile.open(path, "w") as tar:
        tar.addfile(member, buffer)


def write_json(path, step):
    flat, step = tensors(step)
    with open(path, "w") as f:
        json.dump({"step": step, "tensors": {k: v.tolist() for k, v in flat.items()}}, f)
        synced(f)


def write_raw(path, step):
    flat, step = tensors(step)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, np.int64(step).tobytes() + b"".join(v.numpy().tobytes() for _, v in sorted(flat.items())))
        if not args.in_place:
            os.fsync(fd)
    finally:
        os.close(fd)


def load(path):
    """The step a save holds, with model and optimizer restored from it."""
    kind = path.suffix[1:]
    if kind == "npz":
        with np.load(path) as saved:
            return restore({k: saved[k] for k in saved.files if k != "step"}, int(saved["step"]))
    if kind == "raw":
        data = path.read_bytes()
        flat, _ = tensors(0)
        offset, restored = 8, {}
        for k, v in sorted(flat.items()):
            restored[k] = torch.frombuffer(bytearray(data[offset:offset + v.nbytes]), dtype=v.dtype).view(v.shape)
            offset += v.nbytes
        return restore(restored, int(np.frombuffer(data[:8], dtype=np.int64)[0]))
    if kind == "json":
        saved = json.loads(path.read_text())
        return restore({k: torch.tensor(v) for k, v in saved["tensors"].items()}, saved["step"])
    if kind == "tar":
        with tarfile.open(path) as tar:
            saved = torch.load(io.BytesIO(tar.extractfile("state.pt").read()))
    elif kind == "pkl":
        with open(path, "rb") as f:
            saved = pickle.load(f)
    else:
        saved = torch.load(path)
    model.module.load_state_dict(saved["model"])
    if args.bug != "forget-momentum":
        optimizer.load_state_dict(saved["optimizer"])
    return saved["step"]


WRITERS = {"file": write_file, "buffer": write_buffer, "pickle": write_pickle, "numpy": write_numpy,
           "copy": write_copy, "tar": write_tar, "json": write_json, "raw": write_raw}


def save(step, turn):
    api = apis[turn % len(apis)]
    name = f"step_{step}.{EXTENSIONS[api]}"
    commit(args.out / name, lambda path: WRITERS[api](path, step))

    def pointer(path):
        with open(path, "w") as f:
            json.dump({"step": step, "file": name}, f)
            synced(f)
    if args.bug != "stale-latest" or turn % 2 == 0:
        commit(args.out / "latest.json", pointer)


start = 0
found = sorted((int(m.group(1)), p) for p in args.out.iterdir() if (m := re.fullmatch(r"step_(\d+)\.\w+", p.name)))
if args.from_latest:
    latest = args.out / "latest.json"
    found = [(0, args.out / json.loads(latest.read_text())["file"])] if latest.exists() else []
if found:
    start = load(found[-1][1])
for step in range(start + 1, args.steps + 1):
    data = torch.Generator().manual_seed(1000 * step + rank)
    optimizer.zero_grad()
    model(torch.randn(4, 8, generator=data)).square().sum().backward()
    optimizer.step()
    if step % args.save_every == 0:
        if rank == 0:
            save(step, step // args.save_every - 1)
        dist.barrier()
dist.destroy_process_group()
