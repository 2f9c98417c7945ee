"""Resumes shared by the cases that leave the same checkpoint directory: what they are keyed by.

A resume is a function of the directory it starts from: the job is
deterministic, its run directory fresh, and nothing else of the faulted run
reaches it. So of the cases whose faults leave the same directory, one
resumes and the others are judged against that resume, each with its own
faulted run (who died, who raised, whether the save returned), and each
names the case it shares the resume with. A crash before an operation and a
crash after the one before it, a crash at a collective and at the file
operation before it, a power loss anywhere between the same two fsyncs: many
cases leave one state, and the resume is half of what a case costs.

The key is every path, its kind, its size and its bytes: a single differing
byte resumes separately. Timestamps are left out: ranks that write at the
same time order their files' mtimes differently in every run, so keying on
them would share almost nothing, and the saves of one harness run are
milliseconds apart, so a job that picks its checkpoint by mtime is already
racing here. Such a job should run with `share_resumes` off. The resumes
are made once per key by the pipelines' one memo (`pipeline.memo`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class DirState:
    """A digest of a checkpoint directory: equal digests resume alike."""

    digest: str
    #: Files and directories in it, for reports.
    entries: int

    @classmethod
    def of(cls, root: Path) -> "DirState":
        digest = hashlib.blake2b(digest_size=20)
        entries = 0
        for current, dirnames, filenames in os.walk(root):
            dirnames.sort()
            base = Path(current)
            for name in sorted(dirnames + filenames):
                full = base / name
                rel = full.relative_to(root).as_posix()
                info = os.lstat(full)
                entries += 1
                if stat.S_ISREG(info.st_mode):
                    digest.update(f"f {rel} {info.st_size}\0".encode())
                    with open(full, "rb") as f:
                        for block in iter(lambda: f.read(1 << 20), b""):
                            digest.update(block)
                elif stat.S_ISLNK(info.st_mode):
                    digest.update(f"l {rel} {os.readlink(full)}\0".encode())
                else:
                    digest.update(f"{'d' if stat.S_ISDIR(info.st_mode) else '?'} {rel}\0".encode())
        return cls(digest.hexdigest(), entries)
