"""Power loss: what a machine crash leaves of the checkpoint directory.

A crashed *process* leaves everything it wrote in the page cache, and the
kernel writes it out eventually; a crashed *machine* keeps only what had
reached the disk. The difference is where most checkpoint bugs hide: a save
that survives every SIGKILL can still come back as a `latest` pointer to
shards of length zero. This module replays the file-system events the probes
recorded (of every rank, up to the power-loss moment) against a model of what
the disk is guaranteed to hold, and rebuilds the directory accordingly.

Why the model looks the way it does:

* **Names and contents are durable separately, so files are inodes.** An
  entry maps a name to an inode; data belongs to the inode. An open file
  keeps writing to its inode after being renamed or unlinked, and an fsync
  through a file object reaches the inode, whatever its name is by then.
  That is what produces the classic ext4 outcome of a file that exists under
  its final name with size 0 after `write tmp; rename tmp final` without an
  fsync of the data: the rename was durable, the bytes were not.

* **File data is durable up to the last fsync of that inode, as of that
  fsync, and nothing else ever persists it.** POSIX promises nothing for
  unsynced data and real file systems (delayed allocation) do lose it, so
  the model is pessimistic on purpose: a harness must not pass a save that
  works only because the kernel happened to flush early. A new inode starts
  with empty durable content; truncation at open is a data change like a
  write (durable with the next fsync of the inode), so `open("w")` on an
  existing file without a later fsync keeps the *old* durable bytes.

* **Directory entries, mode "strict"** (the weakest POSIX reading, the one
  ALICE/CrashMonkey-style checkers use): an entry operation (create, mkdir,
  rename, unlink, rmdir, rmtree) is durable only once its parent directory
  is fsynced afterwards. Implemented per directory inode: its durable
  entries are a copy of its entries at its last fsync (or at the start, or
  empty when it was created during the run). A rename is two halves, the
  removal in the source's parent and the insertion in the destination's
  parent, each durable with its own directory's fsync (one fsync when both
  are the same directory). When only the destination half is durable, the
  file shows under both names, like a hard link; when only the source half
  is, it is gone. An fsync of a file does not make its own name durable. A
  directory identified as an inode also means an fsync of a directory that
  was renamed since still covers its entries, as on a real file system.

* **Directory entries, mode "ordered"** (ext4 `data=ordered`, and journaling
  file systems in general): metadata reaches the journal in order and any
  fsync commits the journal, so every entry operation that happened before
  the last fsync (of any file or directory, by any rank) is durable, and
  none after it. Data rules stay as above, deliberately: ext4's extra
  flushes (auto_da_alloc) are a heuristic a checkpoint must not rely on.

* **Reachability decides.** The durable tree is what can be reached from
  the checkpoint directory through durable entries; a directory whose
  creation is not durable takes its whole subtree with it, and an rmtree is
  one entry removal (the subtree goes "at once", or not at all).

* **Order across ranks.** Each rank's events keep their own order (`seq`);
  ranks are interleaved by `t`, a `time.monotonic()` stamp that is
  comparable across processes of one machine, ties broken by (rank, seq).

* **The trace is read as the probes write it: each operation is recorded
  just before it runs.** So a recorded operation may not have happened:
  - the model's current namespace mirrors the real one exactly (given an
    accurate `start` and no untraced writer), so an operation that cannot
    succeed in it (unlink of a missing file, `rmtree(ignore_errors=True)` of
    nothing, `mkdir` of an existing directory under `makedirs(exist_ok=True)`,
    a rename onto a non-empty directory, `open("x")` of an existing file) is
    one that failed in the job with that errno, and changes nothing; jobs do
    this on purpose ("remove if present"), so it is not an error;
  - a `fault` event names the operation it stopped (same rank, phase and
    point): for crash, power-loss, error, eio, enospc and the blocking kinds that operation
    never ran and is skipped; delay, crash-after, crash-mid and torn let it
    run (a torn write is recorded as the prefix that landed).
  The power-loss moment itself is the caller's cut (`events_before` the
  time of the fault event leaves the faulted operation out).

* **A file staged outside the checkpoint directory is an inode of no
  directory the model keeps** until a rename brings it in (fsspec's local
  transactions write to the system's temp directory and move the file in;
  the probes follow such files, `files`, and name them by absolute path in
  `outside`, `src_outside`). Its data follows the rules above; its entry
  counts from the rename on, in the destination directory. Outside and
  inside are one file system to the model (in "ordered" mode an fsync of
  either commits the journal of both): a move across file systems is a copy,
  which the probes see as writes inside.

What the model refuses to guess raises `DurabilityError` naming the event: a
write or fsync on a fid that is not open, a file-system-looking event of an
unknown kind or missing a field, a fault kind it does not know, a path
outside the checkpoint directory, a rename into it from outside of a file
it did not see written from its start (unknown content), an operation on
the checkpoint directory's own entry, an fsync of
a directory path that no longer exists (the descriptor followed a rename the
trace cannot tie to it), a data log shorter than a write, and bytes that were
never logged (`data` None) but end up in the durable tree. A wrong model
would silently pass or fail real jobs.

Every path the power loss drops or reverts comes with its reason (`Loss`):
which entry operation or write had not been made durable, and which fsync
was missing, so a refused or older resume points at the line to fix.

One tolerance: a durable graph with a directory cycle (reachable only
through strict-mode rename halves) drops the entry that closes the cycle.
Not modelled: hard links, symlinks, ftruncate, mmap.
"""

from __future__ import annotations

import dataclasses
import enum
import heapq
import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from typing import Callable, Iterable, Optional

from ckpt_harness.errors import ModelError
from ckpt_harness.inject.faults import FAULT_KINDS, LOOKS, OBJECT_OPS

#: Durability modes; see the module docstring.
MODES = ("strict", "ordered")

#: Trace event kinds this model interprets, and the fields each must have.
FIELDS: dict[str, tuple[str, ...]] = {
    "open": ("path", "fid", "trunc", "create"),
    "write": ("fid", "offset", "n", "data"),
    "fsync": ("path", "fid", "is_dir"),
    "rename": ("src", "dst"),
    "unlink": ("path",),
    "mkdir": ("path",),
    "rmdir": ("path",),
    "rmtree": ("path",),
    "close": ("fid",),
}
FS_KINDS = tuple(FIELDS)
#: Recorded operations with no file-system effect of their own: the job's
#: write() into its buffer (its bytes reach the file, if ever, as a later
#: "write"), and looks at the directory.
NO_EFFECT = ("buffered-write", *LOOKS)

#: Fault kinds (trace "fault" events) after which the faulted operation, recorded
#: right after the fault, still takes place (as recorded: a torn write records
#: the prefix that landed) ...
FAULTS_PERFORMED = tuple(k.name for k in FAULT_KINDS if k.performed)
#: ... and those that stop it before it runs.
FAULTS_NOT_PERFORMED = tuple(k.name for k in FAULT_KINDS if not k.performed)

#: Fields that make an event of an unknown kind look like a file-system
#: operation the model would have to understand (instead of ignore).
_FS_FIELDS = ("path", "fid", "src", "dst")

#: read(rank, offset, length[, actor]): bytes of a rank's (or its save process's) data log.
ReadData = Callable[..., bytes]


class DurabilityError(ModelError):
    """An event (or a tree) the durability model cannot interpret."""


@dataclasses.dataclass(frozen=True)
class Snapshot:
    """Regular files (bytes) and directories of a tree, by relative POSIX path.

    `dirs` holds every directory below the root (the root itself, ".", is
    implicit); the parent of each file and directory is in `dirs` or is the
    root.
    """

    files: dict[str, bytes] = dataclasses.field(default_factory=dict)
    dirs: frozenset[str] = frozenset()

    @classmethod
    def empty(cls) -> "Snapshot":
        return cls()

    def paths(self) -> list[str]:
        return sorted([*self.files, *self.dirs])


def snapshot(ckpt_dir: Path) -> Snapshot:
    """Files and directories under `ckpt_dir` (a missing directory is empty)."""
    root = Path(ckpt_dir)
    files: dict[str, bytes] = {}
    dirs: set[str] = set()
    if not root.exists():
        return Snapshot()
    for current, dirnames, filenames in os.walk(root):
        rel_dir = Path(current).relative_to(root)
        for name in dirnames + filenames:
            full = Path(current) / name
            rel = (rel_dir / name).as_posix()
            mode = os.lstat(full).st_mode
            if stat.S_ISDIR(mode):
                dirs.add(rel)
            elif stat.S_ISREG(mode):
                files[rel] = full.read_bytes()
            else:
                raise DurabilityError(
                    f"{full}: not a regular file or directory; the durability model has no "
                    "symlinks or special files"
                )
    return Snapshot(files=files, dirs=frozenset(dirs))


def write_snapshot(ckpt_dir: Path, snap: Snapshot) -> None:
    """Make `ckpt_dir` hold exactly `snap`: remove everything under it, recreate."""
    root = Path(ckpt_dir)
    root.mkdir(parents=True, exist_ok=True)
    for child in root.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
        else:
            child.unlink()
    for rel in sorted(snap.dirs, key=lambda p: (p.count("/"), p)):
        (root / rel).mkdir()
    for rel, data in snap.files.items():
        (root / rel).write_bytes(data)


class LossKind(str, enum.Enum):
    #: A name the job created (or renamed into place) is gone.
    ENTRY = "entry not durable"
    #: A name the job removed (or renamed away) is back.
    REMOVAL = "removal not durable"
    #: The file is there with other bytes than the job wrote.
    DATA = "data not durable"


@dataclasses.dataclass(frozen=True)
class Loss:
    """Why the durable tree differs from what the job left at one path."""

    path: str
    kind: LossKind
    why: str

    def __str__(self) -> str:
        return f"{self.path}: {self.why}"


@dataclasses.dataclass(frozen=True)
class PowerLoss:
    """What a machine crash leaves, and why each difference from the live tree."""

    durable: Snapshot
    losses: tuple[Loss, ...] = ()

    def explain(self, limit: int = 3) -> str:
        """The first losses in one line, for a case's summary."""
        shown = "; ".join(str(loss) for loss in self.losses[:limit])
        more = len(self.losses) - limit
        return shown + (f"; and {more} more" if more > 0 else "")


# -- event order -------------------------------------------------------------
def merge_events(events: Iterable[dict]) -> list[dict]:
    """All ranks' events in one order: each rank by `seq`, ranks interleaved by
    `t`, ties broken by (rank, seq)."""
    per_rank: dict[int, list[dict]] = {}
    for event in events:
        for key in ("rank", "seq", "t"):
            if key not in event:
                raise DurabilityError(f"trace event without {key!r}: {event!r}")
        per_rank.setdefault(event["rank"], []).append(event)
    runs = [sorted(evs, key=lambda e: e["seq"]) for _, evs in sorted(per_rank.items())]
    return list(heapq.merge(*runs, key=lambda e: (e["t"], e["rank"], e["seq"])))


def events_before(events: Iterable[dict], t: float) -> list[dict]:
    """The events that happened strictly before time `t` (a power-loss moment)."""
    return [e for e in events if e["t"] < t]


# -- the model ----------------------------------------------------------------
class _Inode:
    __slots__ = ("is_dir", "label", "data", "unknown", "durable_data", "durable_unknown",
                 "entries", "durable_entries", "how", "synced")

    def __init__(self, is_dir: bool, label: str, data: bytes = b"", durable: bool = False):
        self.is_dir = is_dir
        self.label = label  # the path it was created at, for messages
        # files: current and durable content; byte ranges whose bytes were not logged
        self.data = bytearray(data)
        self.unknown: list[tuple[int, int, dict]] = []
        self.durable_data = bytes(data) if durable else b""
        self.durable_unknown: list[tuple[int, int, dict]] = []
        # directories: current and durable name -> inode
        self.entries: dict[str, _Inode] = {}
        self.durable_entries: dict[str, _Inode] = {}
        # directories: name -> the last entry operation on it, in words (for `Loss`)
        self.how: dict[str, str] = {}
        # whether this run fsynced it (a directory's entries, a file's data)
        self.synced = False

    def commit_entries(self) -> None:
        self.durable_entries = dict(self.entries)

    def commit_data(self) -> None:
        self.durable_data = bytes(self.data)
        self.durable_unknown = list(self.unknown)


def _parts(path: str, event: dict) -> tuple[str, ...]:
    if not isinstance(path, str):
        raise DurabilityError(f"path must be a string: {_describe(event)}")
    p = PurePosixPath(path)
    if p.is_absolute() or ".." in p.parts:
        raise DurabilityError(
            f"path {path!r} is not relative to the checkpoint directory: {_describe(event)}"
        )
    return tuple(part for part in p.parts if part != ".")


def _describe(event: dict) -> str:
    return f"rank {event.get('rank')} seq {event.get('seq')} {event.get('kind')} {event!r}"


class _Model:
    def __init__(self, start: Snapshot, mode: str, read_data: ReadData):
        if mode not in MODES:
            raise ValueError(f"unknown durability mode {mode!r}: choose from {', '.join(MODES)}")
        self.mode = mode
        self.read_data = read_data
        self.root = _Inode(True, ".")
        self.dirs: list[_Inode] = [self.root]
        self.fids: dict[str, _Inode] = {}
        #: Files staged outside the checkpoint directory, by absolute path; those
        #: whose content before this run is unknown (opened without truncating).
        self.outside: dict[str, _Inode] = {}
        self.foreign: set[str] = set()
        #: rank -> (phase, point) of an operation a fault stopped before it ran
        self.faulted: dict[int, tuple[str, int]] = {}
        self._load(start)

    # -- start state: fully durable ------------------------------------------
    def _load(self, start: Snapshot) -> None:
        def parent_of(rel: str) -> _Inode:
            *head, _ = rel.split("/")
            node = self.root
            for name in head:
                node = node.entries.get(name)
                if node is None or not node.is_dir:
                    raise DurabilityError(f"start snapshot: parent of {rel!r} is not a directory")
            return node

        for rel in sorted(start.dirs, key=lambda p: (p.count("/"), p)):
            node = _Inode(True, rel)
            parent_of(rel).entries[rel.rsplit("/", 1)[-1]] = node
            self.dirs.append(node)
        for rel, data in start.files.items():
            parent_of(rel).entries[rel.rsplit("/", 1)[-1]] = _Inode(False, rel, data, durable=True)
        for node in self.dirs:
            node.commit_entries()

    # -- namespace ------------------------------------------------------------
    def lookup(self, parts: tuple[str, ...]) -> Optional[_Inode]:
        """The inode at `parts` now, or None (missing, or a file on the way)."""
        node = self.root
        for name in parts:
            if not node.is_dir:
                return None
            node = node.entries.get(name)
            if node is None:
                return None
        return node

    def place(self, path: str, e: dict) -> tuple[Optional[_Inode], str]:
        """The directory that holds `path` (None if there is none) and the name in it."""
        parts = _parts(path, e)
        if not parts:
            raise DurabilityError(
                "an operation on the checkpoint directory itself is outside the model (its own "
                f"entry lives outside it): {_describe(e)}"
            )
        parent = self.lookup(parts[:-1])
        return (parent if parent is not None and parent.is_dir else None), parts[-1]

    # -- events ----------------------------------------------------------------
    def apply(self, event: dict) -> None:
        kind = event.get("kind")
        rank = event.get("rank")
        if kind == "fault":
            self.on_fault(event)
            return
        pending = self.faulted.get(rank)
        if pending is not None and self._is_point(event, pending):
            del self.faulted[rank]
            if kind in FIELDS:
                return  # the faulted operation: recorded, never performed
        if kind in FIELDS:
            for field in FIELDS[kind]:
                if field not in event:
                    raise DurabilityError(f"{kind} event without field {field!r}: {_describe(event)}")
            getattr(self, "on_" + kind)(event)
        elif kind in NO_EFFECT:
            return
        elif kind in OBJECT_OPS:
            raise DurabilityError(
                f"the save is made of requests to a bucket ({kind} {event.get('path', '')!r}), which this model of a "
                "local directory does not replay: every case runs against the real server, which keeps what it keeps"
            )
        elif any(field in event for field in _FS_FIELDS):
            raise DurabilityError(
                f"file-system event of a kind the durability model does not know: {_describe(event)}"
            )

    @staticmethod
    def _is_point(event: dict, pending: tuple[str, int]) -> bool:
        """Whether `event` is the operation a fault was armed at."""
        if "point" in event:  # every operation the probes record carries its point
            return event["point"] == pending[1] and event.get("phase") == pending[0]
        # traces without points: the rank's next operation (close is never a point)
        return event.get("kind") in FIELDS and event.get("kind") != "close"

    def on_fault(self, e: dict) -> None:
        kind = e.get("fault")
        if kind in FAULTS_PERFORMED:
            return
        if kind not in FAULTS_NOT_PERFORMED or "index" not in e:
            raise DurabilityError(
                f"fault event the durability model cannot interpret (does the faulted operation "
                f"take place?): {_describe(e)}"
            )
        self.faulted[e["rank"]] = (e.get("phase"), e["index"])

    def on_open(self, e: dict) -> None:
        fid = e["fid"]
        if fid in self.fids:
            raise DurabilityError(f"fid {fid!r} opened twice: {_describe(e)}")
        if e.get("outside"):
            self._open_outside(e)
            return
        parent, name = self.place(e["path"], e)
        if parent is None:
            return  # ENOENT/ENOTDIR
        node = parent.entries.get(name)
        if node is None:
            if not e["create"]:
                return  # ENOENT
            node = _Inode(False, e["path"])
            parent.entries[name] = node
            parent.how[name] = "created"
        elif node.is_dir or "x" in e.get("mode", ""):
            return  # EISDIR, EEXIST
        if e["trunc"]:
            node.data = bytearray()
            node.unknown = []
        self.fids[fid] = node

    def _open_outside(self, e: dict) -> None:
        path = e["outside"]
        node = self.outside.get(path)
        if node is None:
            node = self.outside[path] = _Inode(False, path)
            if not (e["trunc"] or "x" in e.get("mode", "")):
                self.foreign.add(path)  # it may have held bytes before this run
        elif "x" in e.get("mode", ""):
            return  # EEXIST
        if e["trunc"]:
            node.data = bytearray()
            node.unknown = []
            self.foreign.discard(path)
        self.fids[e["fid"]] = node

    def on_write(self, e: dict) -> None:
        node = self._fid(e)
        offset, n, ref = e["offset"], e["n"], e["data"]
        if n == 0:
            return  # writes nothing, extends nothing
        end = offset + n
        if ref is None:
            data = None
        else:
            log_offset, length = ref[:2]
            data = self.read_data(e["rank"], *ref)[:n]  # [offset, length(, the log's actor)]
            if len(data) != n:
                raise DurabilityError(
                    f"data log of rank {e['rank']} holds {len(data)} bytes at {log_offset}, "
                    f"the write landed {n}: {_describe(e)}"
                )
        if len(node.data) < end:
            node.data.extend(bytes(end - len(node.data)))  # a hole reads as zeros
        node.unknown = [piece for a, b, src in node.unknown
                        for piece in ((a, min(b, offset), src), (max(a, end), b, src))
                        if piece[0] < piece[1]]
        if data is None:
            node.unknown.append((offset, end, e))  # raises only if it becomes durable
        else:
            node.data[offset:end] = data

    def on_fsync(self, e: dict) -> None:
        if e["fid"] is not None:
            node = self._fid(e)
        elif e.get("outside"):  # a staged file (else nothing the model keeps: a directory outside)
            node = self.outside.get(e["outside"])
            if node is None:
                return
        else:
            node = self.lookup(_parts(e["path"], e))
            if node is None:
                raise DurabilityError(
                    f"fsync of a path that does not exist (now): a descriptor fsynced after its "
                    f"path changed cannot be followed: {_describe(e)}"
                )
        if bool(e["is_dir"]) != node.is_dir:
            raise DurabilityError(
                f"fsync says is_dir={e['is_dir']} but the path is a "
                f"{'directory' if node.is_dir else 'file'}: {_describe(e)}"
            )
        node.synced = True
        if self.mode == "ordered":
            for d in self.dirs:  # the journal commit: every entry operation so far
                d.commit_entries()
        if node.is_dir:
            node.commit_entries()
        else:
            node.commit_data()

    def on_close(self, e: dict) -> None:
        self.fids.pop(e["fid"], None)  # the fid of a failed open was never registered

    def on_mkdir(self, e: dict) -> None:
        if not _parts(e["path"], e):
            return  # EEXIST: the checkpoint directory itself
        parent, name = self.place(e["path"], e)
        if parent is None or name in parent.entries:
            return  # ENOENT, EEXIST (what makedirs(exist_ok=True) swallows)
        node = _Inode(True, e["path"])
        parent.entries[name] = node
        parent.how[name] = "created (mkdir)"
        self.dirs.append(node)

    def on_unlink(self, e: dict) -> None:
        if not _parts(e["path"], e):
            return  # EISDIR
        parent, name = self.place(e["path"], e)
        node = parent.entries.get(name) if parent is not None else None
        if node is not None and not node.is_dir:
            del parent.entries[name]
            parent.how[name] = "unlinked"

    def on_rmdir(self, e: dict) -> None:
        parent, name = self.place(e["path"], e)
        node = parent.entries.get(name) if parent is not None else None
        if node is not None and node.is_dir and not node.entries:
            del parent.entries[name]
            parent.how[name] = "removed (rmdir)"

    def on_rmtree(self, e: dict) -> None:
        parent, name = self.place(e["path"], e)
        node = parent.entries.get(name) if parent is not None else None
        if node is not None and node.is_dir:
            del parent.entries[name]  # the subtree goes with its one entry
            parent.how[name] = "removed (rmtree)"

    def on_rename(self, e: dict) -> None:
        if e["src"] is None:
            self._rename_in(e)
            return
        src_parent, src_name = self.place(e["src"], e)
        node = src_parent.entries.get(src_name) if src_parent is not None else None
        if node is None:
            return  # ENOENT
        if e["dst"] is None:  # moved out of the checkpoint directory: gone from it
            del src_parent.entries[src_name]
            src_parent.how[src_name] = "moved out of the checkpoint directory"
            if not node.is_dir and e.get("dst_outside"):  # staged there now: it may come back
                self.outside[e["dst_outside"]] = node
                self.foreign.discard(e["dst_outside"])
            return
        dst_parent, dst_name = self.place(e["dst"], e)
        if dst_parent is None:
            return  # ENOENT
        target = dst_parent.entries.get(dst_name)
        if target is node:
            return  # the same file: POSIX rename does nothing
        if node.is_dir and self._inside(dst_parent, node):
            return  # EINVAL: into its own subtree
        if target is not None and (target.is_dir != node.is_dir or (target.is_dir and target.entries)):
            return  # EISDIR, ENOTDIR, ENOTEMPTY
        del src_parent.entries[src_name]
        dst_parent.entries[dst_name] = node
        src_parent.how[src_name] = f"renamed to {e['dst']}"
        dst_parent.how[dst_name] = f"renamed from {e['src']}" + (" (replacing a file)" if target is not None else "")

    def _rename_in(self, e: dict) -> None:
        """A file staged outside moves in: the destination half of a rename."""
        path = e.get("src_outside") or ""
        node = self.outside.get(path)
        if node is None or path in self.foreign:
            raise DurabilityError(
                "rename into the checkpoint directory from outside it of a file the probes did not see "
                f"written from its start (before the save, or not through a probed call): its content is "
                f"unknown: {_describe(e)}"
            )
        dst_parent, dst_name = self.place(e["dst"], e)
        target = dst_parent.entries.get(dst_name) if dst_parent is not None else None
        if dst_parent is None or target is not None and target.is_dir:
            return  # ENOENT, EISDIR
        del self.outside[path]
        dst_parent.entries[dst_name] = node
        dst_parent.how[dst_name] = ("renamed in from outside the checkpoint directory"
                                    + (" (replacing a file)" if target is not None else ""))

    def _inside(self, directory: _Inode, ancestor: _Inode) -> bool:
        """Whether `directory` is `ancestor` or below it, in the current namespace."""
        stack = [ancestor]
        while stack:
            d = stack.pop()
            if d is directory:
                return True
            stack.extend(c for c in d.entries.values() if c.is_dir)
        return False

    def _fid(self, e: dict) -> _Inode:
        node = self.fids.get(e["fid"])
        if node is None:
            raise DurabilityError(f"fid {e['fid']!r} is not open: {_describe(e)}")
        return node

    # -- the durable tree --------------------------------------------------------
    def durable(self) -> Snapshot:
        files: dict[str, bytes] = {}
        dirs: set[str] = set()

        def walk(node: _Inode, prefix: str, ancestors: tuple[_Inode, ...]) -> None:
            for name, child in sorted(node.durable_entries.items()):
                rel = f"{prefix}{name}"
                if child.is_dir:
                    if any(child is a for a in ancestors):
                        continue  # a cycle of strict-mode rename halves
                    dirs.add(rel)
                    walk(child, rel + "/", ancestors + (child,))
                else:
                    for a, b, src in child.durable_unknown:
                        if a < len(child.durable_data):
                            raise DurabilityError(
                                f"durable content of {rel!r} includes bytes {a}..{b} that were "
                                f"never logged: {_describe(src)}"
                            )
                    files[rel] = child.durable_data

        walk(self.root, "", (self.root,))
        return Snapshot(files=files, dirs=frozenset(dirs))


    def live(self) -> Snapshot:
        """The tree as the processes left it: every completed operation, durable or not."""
        files: dict[str, bytes] = {}
        dirs: set[str] = set()

        def walk(node: _Inode, prefix: str) -> None:
            for name, child in sorted(node.entries.items()):
                rel = f"{prefix}{name}"
                if child.is_dir:
                    dirs.add(rel)
                    walk(child, rel + "/")
                elif child.unknown:
                    raise DurabilityError(f"content of {rel!r} includes bytes that were never logged: "
                                          f"{_describe(child.unknown[0][2])}")
                else:
                    files[rel] = bytes(child.data)

        walk(self.root, "")
        return Snapshot(files=files, dirs=frozenset(dirs))

    # -- why the durable tree differs from the live one ------------------------------
    def losses(self) -> list[Loss]:
        """Each path where the live tree (what the job left) and the durable
        tree part, with the missing fsync; a lost directory stands for its subtree."""
        out: list[Loss] = []

        def walk(node: _Inode, prefix: str) -> None:
            where = f"`{prefix.rstrip('/')}`" if prefix else "the checkpoint directory"
            for name in sorted(node.entries.keys() | node.durable_entries.keys()):
                rel = f"{prefix}{name}"
                now, then = node.entries.get(name), node.durable_entries.get(name)
                how = node.how.get(name)
                if now is not None and then is not now:
                    comes_back = "; the old one comes back" if then is not None else ""
                    out.append(Loss(rel, LossKind.ENTRY,
                                    f"{how or 'created'}, but {self._unsynced(node, where)}{comes_back}"))
                elif now is None and then is not None:
                    out.append(Loss(rel, LossKind.REMOVAL,
                                    f"{how or 'removed'}, but {self._unsynced(node, where)}: it comes back"))
                elif now is not None and now.is_dir:
                    walk(now, rel + "/")
                elif now is not None and bytes(now.data) != now.durable_data:
                    out.append(Loss(rel, LossKind.DATA, _data_lost(now)))

        walk(self.root, "")
        return out

    def _unsynced(self, directory: _Inode, where: str) -> str:
        if self.mode == "ordered":
            return "nothing was fsynced after that (ordered mode: the journal commits at the next fsync)"
        return f"{where} was {'not fsynced after that' if directory.synced else 'never fsynced'}"


def _data_lost(node: _Inode) -> str:
    written, kept = len(node.data), len(node.durable_data)
    if not node.synced:
        return f"{written} bytes written but never fsynced: it comes back with {kept} bytes"
    return f"written after its last fsync ({written} bytes now, {kept} bytes as of that fsync)"


def power_loss(start: Snapshot, events: Iterable[dict], read_data: ReadData, mode: str = "strict") -> PowerLoss:
    """The tree a machine crash right after `events` leaves, from a fully
    durable `start`, with the reason for every path it loses (pure: touches no disk)."""
    model = _Model(start, mode, read_data)
    for event in merge_events(events):
        model.apply(event)
    return PowerLoss(model.durable(), tuple(model.losses()))


def process_crash(start: Snapshot, events: Iterable[dict], read_data: ReadData) -> Snapshot:
    """The tree a crash of processes (not of the machine) right after `events`
    leaves: the kernel keeps every operation that completed (pure)."""
    model = _Model(start, "strict", read_data)
    for event in merge_events(events):
        model.apply(event)
    return model.live()


def durable_state(start: Snapshot, events: Iterable[dict], read_data: ReadData,
                  mode: str = "strict") -> Snapshot:
    """The tree a machine crash right after `events` leaves (see `power_loss`)."""
    return power_loss(start, events, read_data, mode).durable


def apply_power_loss(ckpt_dir: Path, start: Snapshot, events: Iterable[dict],
                     read_data: ReadData, mode: str = "strict") -> PowerLoss:
    """Rebuild `ckpt_dir` as a power loss after `events` (every rank's events
    before the moment) leaves it; returns what it now holds and why.

    Everything is computed before the directory is touched, so an event the
    model cannot interpret leaves the directory as it was.
    """
    result = power_loss(start, events, read_data, mode)
    write_snapshot(ckpt_dir, result.durable)
    return result
