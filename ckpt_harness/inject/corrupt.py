"""Corruption of a committed checkpoint: what disks, controllers and careless
scripts do to files after a save returned.

The property judged is *detecting*: a resume from a corrupted checkpoint must
either still be bitwise right (the damage hit something unused) or refuse
clearly; silent garbage is a finding. So every operator here is
deterministic (a failing case must replay exactly) and always changes the
file: an operator that would leave the bytes as they were (an empty file, a
page that is already zero) raises `CorruptionError` instead (that case is
an ERROR: the harness could not make it), because a "corruption"
that changed nothing would be reported as undetected when there was nothing
to detect. Files are changed in place (same inode), as bit rot would.

Each operator returns a short description for reports; it does not name the
file, which the caller knows by its path relative to the checkpoint.

`unsafe-pickle` is not damage but an attack: the file is replaced by a
pickle that runs code when unpickled (`inject.payload`), judged under
*safe-loading* rather than *detecting*. It is opt-in (not in
`DEFAULT_CORRUPTIONS`): its cases answer another question than bit rot.
"""

from __future__ import annotations

import os
import random
import stat
from pathlib import Path
from typing import Callable

from ckpt_harness.errors import ModelError
from ckpt_harness.inject import payload

PAGE = 4096


class CorruptionError(ModelError, ValueError):
    """This file cannot be damaged this way (the bytes would not change)."""


def _size(path: Path, what: str) -> int:
    size = os.path.getsize(path)
    if size == 0:
        raise CorruptionError(f"{what}: {path} is empty (0 bytes), there is nothing to corrupt")
    return size


def bit_flip(path: Path, seed: int = 0) -> str:
    """Flip one bit: seed 0 flips the lowest bit of the middle byte, any other
    seed picks the bit with `random.Random(seed)`."""
    size = _size(path, "bit-flip")
    if seed == 0:
        byte, bit = size // 2, 0
    else:
        byte, bit = divmod(random.Random(seed).randrange(size * 8), 8)
    with open(path, "r+b") as f:
        f.seek(byte)
        old = f.read(1)[0]
        new = old ^ (1 << bit)
        f.seek(byte)
        f.write(bytes([new]))
    return f"flipped bit {bit} of byte {byte} of {size} (0x{old:02x} -> 0x{new:02x})"


def zero_page(path: Path, page: int = PAGE) -> str:
    """Zero the `page`-byte page that holds the middle byte of the file,
    clipped to the file's end."""
    if page <= 0:
        raise ValueError(f"zero-page: page size must be positive, got {page}")
    size = _size(path, "zero-page")
    start = (size // 2) // page * page
    end = min(start + page, size)
    with open(path, "r+b") as f:
        f.seek(start)
        if not any(f.read(end - start)):
            raise CorruptionError(
                f"zero-page: bytes {start}..{end} of {path} are already zero, zeroing them "
                "changes nothing"
            )
        f.seek(start)
        f.write(bytes(end - start))
    return f"zeroed bytes {start}..{end} of {size} (page {start // page} of {page} bytes)"


def truncate(path: Path) -> str:
    """Cut the file to half its size (rounded down)."""
    size = _size(path, "truncate")
    os.truncate(path, size // 2)
    return f"truncated from {size} to {size // 2} bytes"


def delete(path: Path) -> str:
    """Remove the file."""
    size = os.path.getsize(path)
    os.unlink(path)
    return f"deleted ({size} bytes)"


def _damage(operator: Callable[[Path], str]) -> Callable[[Path, Path], str]:
    """An operator that needs no canary, as a `CORRUPTIONS` entry."""
    def apply(path: Path, canary: Path) -> str:
        return operator(path)

    apply.__doc__ = operator.__doc__
    return apply


#: The kind that plants a malicious pickle (judged under safe-loading).
UNSAFE_PICKLE = "unsafe-pickle"

#: name -> operator(path, canary) -> description; the names used on the
#: command line. `canary` is a directory of the case's own run directory,
#: outside the checkpoint, where a planted payload leaves its trace.
CORRUPTIONS: dict[str, Callable[[Path, Path], str]] = {
    "bit-flip": _damage(bit_flip),
    "zero-page": _damage(zero_page),
    "truncate": _damage(truncate),
    "delete": _damage(delete),
    UNSAFE_PICKLE: payload.plant,
}

#: What `explore` does to committed files unless told otherwise: the damage
#: (detecting), not the attack.
DEFAULT_CORRUPTIONS = tuple(name for name in CORRUPTIONS if name != UNSAFE_PICKLE)


def committed_files(ckpt_dir: Path) -> list[str]:
    """Relative POSIX paths of the regular files under `ckpt_dir`, sorted
    (symlinks are not followed and not listed)."""
    root = Path(ckpt_dir)
    found = []
    for current, _dirs, files in os.walk(root):
        for name in files:
            full = Path(current) / name
            if stat.S_ISREG(os.lstat(full).st_mode):
                found.append(full.relative_to(root).as_posix())
    return sorted(found)
