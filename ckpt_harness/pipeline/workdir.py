"""The work directory of a command: where its runs go, and which directory a case gets.

Runs write only under the directory the user (or a temporary directory)
gave; one left by an earlier run is emptied, anything else is refused.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Optional, Union

from ckpt_harness.errors import UsageError

MARKER = ".ckpt-harness-workdir"


def prepare_workdir(workdir: Optional[Union[str, Path]]) -> Path:
    """An empty directory for runs: a new temporary one, or `workdir`.

    A workdir left by an earlier run of the harness (it holds our marker) is
    emptied, since stale traces or checkpoints would be read as this run's;
    any other non-empty directory is refused rather than touched.
    """
    if workdir is None:
        root = Path(tempfile.mkdtemp(prefix="ckpt-harness-"))
    else:
        root = Path(workdir)
        if root.exists() and not root.is_dir():
            raise UsageError(f"workdir {root} is a file; give a new or empty directory")
        try:
            root.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise UsageError(f"cannot create workdir {root}: {exc.strerror}; give a directory you can write to") \
                from None
        entries = list(root.iterdir())
        if entries and not (root / MARKER).exists():
            raise UsageError(f"workdir {root} is not empty and was not made by ckpt-harness; "
                             "give a new or empty directory")
        for entry in entries:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
    try:
        (root / MARKER).write_text("made by ckpt-harness; its contents are replaced on the next run\n")
    except OSError as exc:
        raise UsageError(f"cannot write to workdir {root}: {exc.strerror}; give a directory you can write to") \
            from None
    return root


def fresh_dir(parent: Path, name: str) -> Path:
    """A new directory under `parent` whose name starts with `name`, unique
    without a counter (cases running in parallel each get their own)."""
    parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f"{dir_prefix(name)}-", dir=parent))


def dir_prefix(name: str) -> str:
    """How `fresh_dir` starts a directory named after `name`: file-name
    characters only, and short, since it is in every path a report quotes."""
    return "".join(c if c.isalnum() or c in "-_.=" else "_" for c in name)[:32]


def check_writable(path: Path, directory: bool = False) -> None:
    """Refuse an output path before the runs, not after them (without
    creating anything: bad input further on must leave no trace)."""
    if path.exists() and path.is_dir() != directory:
        raise UsageError(f"{path} is a {'file' if directory else 'directory'}; "
                         f"give a {'directory' if directory else 'file'} path")
    existing = path if directory else path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"cannot write {path}: {existing} is not a directory you can write to")
