"""A malicious pickle planted in a committed checkpoint, and the trace it
leaves if a loader runs it.

`torch.load(weights_only=False)`, `pickle.load` and every reader built on
them execute whatever a pickle's `__reduce__` names: a checkpoint file from
a shared bucket or a downloaded model is then code. The *safe-loading*
property asks whether a job's resume runs such code. To know without
guessing, the planted file really is one a careless loader runs: its
payload only calls stdlib functions, harmlessly — it appends the loading
process's stack to a file named after its pid, in a canary directory of
the case's own run directory (never outside the dirs the harness was
given). An empty canary directory after the resume means no loader ran it;
a file there names the process (hence the rank) and, by its stack, the
loader.

The format follows the file it replaces, because that is what the job's
loader parses: a file that was a torch zip archive (`torch.save`'s format
since torch 1.6: `.pt`, `.pth`, `.bin`, DCP's `.distcp`) becomes a real
`torch.save` archive of the payload, which `torch.load(weights_only=False)`
runs and `weights_only=True` refuses; any other file (DCP's `.metadata`, a
legacy torch file, a pointer, JSON) becomes a plain pickle stream, which
`pickle.load` runs, and so does `torch.load(weights_only=False)` (its
legacy path unpickles the stream's first object before checking anything).
"""

from __future__ import annotations

import dataclasses
import io
import os
import pickle
import posixpath
import re
import traceback
from pathlib import Path
from typing import Optional

#: The first bytes of a zip archive, as `torch.save` writes one.
ZIP_MAGIC = b"PK\x03\x04"


class _Call:
    """Pickles as `func(*args)`: what unpickling it executes."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def payload(canary_dir: Path) -> _Call:
    """`traceback.print_stack(None, None, open(join(canary_dir, str(getpid())), "a", 1))`:
    the loading process appends its stack to `canary_dir/<pid>` (line
    buffered, so it is on disk even if the process dies right after)."""
    where = _Call(posixpath.join, str(canary_dir), _Call(str, _Call(os.getpid)))
    return _Call(traceback.print_stack, None, None, _Call(open, where, "a", 1))


def plant(path: Path, canary_dir: Path) -> str:
    """Replace `path` by a pickle whose loading writes into `canary_dir`, in
    the format of the file it replaces; returns what was done, for reports."""
    canary_dir = Path(canary_dir).absolute()  # a job that changes its directory must still write it there
    canary_dir.mkdir(parents=True, exist_ok=True)
    with open(path, "rb") as f:
        zipped = f.read(len(ZIP_MAGIC)) == ZIP_MAGIC
    size = os.path.getsize(path)
    if zipped:
        import torch  # only a torch archive needs torch; a plain pickle does not

        buffer = io.BytesIO()
        torch.save(payload(canary_dir), buffer)
        data, kind = buffer.getvalue(), "a torch.save archive"
    else:
        data, kind = pickle.dumps(payload(canary_dir), protocol=2), "a plain pickle"  # what legacy torch files use
    with open(path, "wb") as f:  # in place (same inode), as the other corruptions
        f.write(data)
    return f"replaced ({size} bytes) by {kind} whose __reduce__ writes a canary file when unpickled"


@dataclasses.dataclass(frozen=True)
class Ran:
    """One process that ran the planted payload, and the stack it ran it from."""

    pid: int
    stack: str

    @property
    def job_stack(self) -> str:
        """The stack from the job's own code inward: the harness's launcher
        frames above it (fork server, rank entry) say nothing about the loader."""
        lines = self.stack.splitlines()
        starts = [i for i, line in enumerate(lines) if _FRAME.search(line) and _HARNESS.search(line)]
        return "\n".join(lines[starts[-1] + 2:] if starts and starts[-1] + 2 < len(lines) else lines)

    @property
    def loader(self) -> str:
        """The innermost frames of its stack (the unpickler and its callers),
        innermost first: which loader ran the payload."""
        frames = [m.groups() for m in _FRAME.finditer(self.stack)]
        if not frames:
            return "(no stack written)"
        return " <- ".join(f"{func} ({_tail(file)}:{line})" for file, line, func in reversed(frames[-_SHOWN:]))


_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
#: The harness's frames that run a rank's job (`Ran.job_stack` starts after the last).
_HARNESS = re.compile(r"ckpt_harness/(launch/|rankside/)")
#: Frames of the stack `Ran.loader` shows.
_SHOWN = 4


def _tail(file: str) -> str:
    """A source path as from its package: site-packages/torch/x.py -> torch/x.py."""
    parts = Path(file).parts
    for marker in ("site-packages", "dist-packages"):
        if marker in parts:
            return "/".join(parts[parts.index(marker) + 1:])
    return "/".join(parts[-2:])


def ran(canary_dir: Path) -> tuple[Ran, ...]:
    """Every process that ran the payload planted with `canary_dir`, by pid."""
    if not canary_dir.is_dir():
        return ()
    found = []
    for entry in sorted(canary_dir.iterdir()):
        pid: Optional[int] = int(entry.name) if entry.name.isdigit() else None
        found.append(Ran(pid if pid is not None else -1, entry.read_text(errors="replace")))
    return tuple(found)
