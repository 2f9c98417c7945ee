"""Checkpointers written from scratch on the tiny DDP job: correct ones
(the reference and the twins of the buffering bugs) and ones that each ship
one classic bug.

They share the model, data and training of the built-in jobs (`TinyJob`, DDP
with the rank-ordered gradient mean) and the file set below; they differ only
in how and in which order they write, publish, discover and read it. Every one
of them resumes bitwise in a fault-free run, except `Rank0OnlyBarrier`, which
hangs: the other bugs only show under the harness's faults (crash, power
loss, corruption, an error on one rank). Each docstring names the property
that must flag the class, and why.

Files of one save, whatever the layout:

    model.pt, optimizer.pt, scheduler.pt   rank 0: the replicated state
    rank{r}.pt                              rank r: step, rank, world size, RNG states, data position

Layout of `ReferenceCheckpointer` under `ctx.ckpt_dir`:

    tmp.step_000006/        a save in progress (a crashed one is removed by the next save)
    step_000004/            committed: renamed from tmp.step_000004 once complete and fsynced
        manifest.json       rank 0: {"step", "world_size", "files": {name: {"size", "sha256"}}}
        model.pt optimizer.pt scheduler.pt rank0.pt rank1.pt ...
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import sys
import subprocess
import shutil
import warnings
from io import BytesIO
from pathlib import Path
from typing import Any, Optional

import torch
import torch.distributed as dist

from ckpt_harness.job import Job, RankContext
from ckpt_harness.jobs._common import (
    LATEST,
    atomic_write_text,
    check_extra,
    fsync_dir,
    read_latest,
    step_dir,
    unanimous,
)
from ckpt_harness.jobs.torch_save import TorchSaveJob

SHARED = ("model.pt", "optimizer.pt", "scheduler.pt")
MANIFEST = "manifest.json"


def rank_file(rank: int) -> str:
    return f"rank{rank}.pt"


def step_dirs(ckpt_dir: Path) -> list[tuple[int, Path]]:
    """Committed checkpoints (`step_N` directories), oldest first; `tmp.*` never counts."""
    found = []
    for p in Path(ckpt_dir).iterdir():
        prefix, _, digits = p.name.partition("_")
        if prefix == "step" and digits.isdigit() and p.is_dir():
            found.append((int(digits), p))
    return sorted(found)


def everywhere(ctx: RankContext, fn: Any) -> list[Any]:
    """Run this rank's local part of a save and return every rank's result;
    if it failed on any rank, raise on every rank, naming the rank and error.
    Without this an EIO on one rank leaves its peers in the next barrier."""
    try:
        result, error = fn(), None
    except Exception as e:
        result, error = None, e
    outcomes: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(outcomes, (result, None if error is None else f"{type(error).__name__}: {error}"))
    if error is not None:
        raise error
    failed = [f"rank {r}: {m}" for r, (_, m) in enumerate(outcomes) if m is not None]
    if failed:
        raise RuntimeError("checkpoint save failed on other ranks; " + "; ".join(failed))
    return [r for r, _ in outcomes]


class CorruptCheckpoint(RuntimeError):
    """A committed checkpoint whose files do not match its manifest; the message names the file."""


class _Checkpointer(TorchSaveJob):
    """DDP replicas plus the pieces every checkpointer here is made of.

    Subclasses write `save` from these pieces and implement `_discover`
    (which checkpoint to resume from); `_prepare`, `_bytes` and `durable`
    are the hooks the planted bugs turn.
    """

    #: False: no fsync of any file or directory.
    durable = True
    #: False: trust that a rank file belongs to the step being loaded.
    checks_extra = True
    #: No world-size change: these checkpointers refuse a checkpoint of
    #: another world size, so world-size change scenarios report "n/a".
    full_state = Job.full_state

    def _targets(self) -> dict[str, Any]:
        return {"model.pt": self.model.module, "optimizer.pt": self.optimizer, "scheduler.pt": self.scheduler}

    # -- writing ----------------------------------------------------------------
    def _make_dir(self, ctx: RankContext, path: Path) -> None:
        """Rank 0 prepares `path` while every other rank waits on both sides."""
        dist.barrier()
        everywhere(ctx, lambda: self._prepare(ctx, path) if ctx.rank == 0 else None)

    def _prepare(self, ctx: RankContext, path: Path) -> None:
        if path.exists():
            shutil.rmtree(path)
        path.mkdir(parents=True)
        self._sync_dir(path.parent)

    def _write_files(self, ctx: RankContext, path: Path, step: int) -> dict[str, dict]:
        """Write this rank's files into `path`; return their sizes and checksums."""
        parts = {rank_file(ctx.rank): self._extra(ctx, step)}
        if ctx.rank == 0:
            parts = {name: obj.state_dict() for name, obj in self._targets().items()} | parts
        written = {}
        for name, obj in parts.items():
            # Checksums of the bytes meant, not of the file read back: a torn
            # write must not vouch for itself.
            buffer = BytesIO()
            torch.save(obj, buffer)
            data = buffer.getvalue()
            with open(path / name, "wb") as f:
                f.write(data)
                self._sync_file(f)
            written[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        return written

    def _sync_file(self, f: Any) -> None:
        f.flush()
        if self.durable:
            os.fsync(f.fileno())

    def _sync_dir(self, path: Path) -> None:
        if self.durable:
            fsync_dir(path)

    def _rotate(self, ctx: RankContext, step: int) -> None:
        """Rank 0, once `step` is published: keep it and the newest keep_last - 1 before it."""
        if ctx.keep_last is None:
            return
        older = [p for s, p in step_dirs(ctx.ckpt_dir) if s < step]
        for p in older[: max(0, len(older) - (ctx.keep_last - 1))]:
            shutil.rmtree(p)
        self._sync_dir(ctx.ckpt_dir)

    # -- reading ----------------------------------------------------------------
    def load(self, ctx: RankContext) -> Optional[int]:
        return unanimous(ctx, lambda: self._load(ctx))

    def _load(self, ctx: RankContext) -> Optional[int]:
        """This rank's collective-free part of a resume."""
        found = self._discover(ctx)
        if found is None:
            return None
        step, path = found
        parts = {}
        for name in (*SHARED, rank_file(ctx.rank)):
            data = self._bytes(ctx, path, name)
            if data is not None:
                # weights_only=False: the rank file holds numpy's RNG state (an ndarray)
                parts[name] = torch.load(BytesIO(data), map_location="cpu", weights_only=False)
        for name, target in self._targets().items():
            if name in parts:
                target.load_state_dict(parts[name])
        self.step = step
        extra = parts.get(rank_file(ctx.rank))
        if extra is not None:
            if self.checks_extra:
                check_extra(extra, ctx, step, path / rank_file(ctx.rank))
            self._restore_extra(extra, step)
        return step

    def _discover(self, ctx: RankContext) -> Optional[tuple[int, Path]]:
        """(step, directory) to resume from, or None for a fresh start."""
        raise NotImplementedError

    def _bytes(self, ctx: RankContext, path: Path, name: str) -> Optional[bytes]:
        """The content of file `name` of the checkpoint in `path` (None: skip it)."""
        return (path / name).read_bytes()


class ReferenceCheckpointer(_Checkpointer):
    """The correct one: must pass every property, power loss in strict mode included.

    Save: every rank writes and fsyncs its files in `tmp.step_N` (rank 0
    creates it after a barrier and first removes stale `tmp.*` dirs of a
    crashed save); the per-rank sizes and sha256 are all-gathered and rank 0
    writes and fsyncs `manifest.json`, fsyncs the tmp dir, renames it to
    `step_N` (the commit), fsyncs `ckpt_dir`, and only then rotates
    (`keep_last`); a last barrier makes a returned save a committed one
    everywhere. Load: every rank discovers on its own, unanimously checked:
    the newest `step_N` whose manifest and every file verify (size, sha256);
    older intact ones are the fallback (with a warning naming the bad file);
    if committed checkpoints exist and none is intact, every rank raises
    naming the bad files. Every file is verified again as it is read.
    """

    def save(self, ctx: RankContext, step: int) -> None:
        final = step_dir(ctx.ckpt_dir, step)
        tmp = final.with_name(f"tmp.{final.name}")
        self._make_dir(ctx, tmp)
        gathered = everywhere(ctx, lambda: self._write_files(ctx, tmp, step))
        files = {name: entry for written in gathered for name, entry in written.items()}
        everywhere(ctx, lambda: self._commit(ctx, step, tmp, final, files) if self._commits(ctx) else None)

    def _commits(self, ctx: RankContext) -> bool:
        """Whether this rank publishes the checkpoint: rank 0 alone."""
        return ctx.rank == 0

    def _prepare(self, ctx: RankContext, path: Path) -> None:
        for stale in Path(ctx.ckpt_dir).glob("tmp.*"):
            shutil.rmtree(stale)
        super()._prepare(ctx, path)

    def _commit(self, ctx: RankContext, step: int, tmp: Path, final: Path, files: dict) -> None:
        with open(tmp / MANIFEST, "w") as f:
            json.dump({"step": step, "world_size": ctx.world_size, "files": files}, f, indent=1, sort_keys=True)
            self._sync_file(f)
        self._sync_dir(tmp)
        for s, abandoned in step_dirs(ctx.ckpt_dir):
            if s >= step:  # only a checkpoint that load refused can be newer than a running save
                shutil.rmtree(abandoned)
        os.rename(tmp, final)
        self._sync_dir(ctx.ckpt_dir)
        self._rotate(ctx, step)

    def _discover(self, ctx: RankContext) -> Optional[tuple[int, Path]]:
        problems = []
        for step, path in reversed(step_dirs(ctx.ckpt_dir)):
            try:
                self._verify(ctx, step, path)
            except CorruptCheckpoint as e:
                problems.append(str(e))
                continue
            if problems:
                warnings.warn(f"resuming from {path.name}; newer checkpoints are damaged: {'; '.join(problems)}")
            return step, path
        if problems:
            raise CorruptCheckpoint(f"no intact checkpoint in {ctx.ckpt_dir}: {'; '.join(problems)}")
        return None

    def _verify(self, ctx: RankContext, step: int, path: Path) -> None:
        manifest = self._manifest(path)
        if (manifest.get("step"), manifest.get("world_size")) != (step, ctx.world_size):
            raise CorruptCheckpoint(
                f"{path / MANIFEST}: for step {manifest.get('step')} at world size "
                f"{manifest.get('world_size')}, expected step {step} at world size {ctx.world_size}"
            )
        expected = {*SHARED, *(rank_file(r) for r in range(ctx.world_size))}
        if not expected <= manifest["files"].keys():
            raise CorruptCheckpoint(f"{path / MANIFEST}: does not list {sorted(expected - manifest['files'].keys())}")
        for name in sorted(expected):
            self._bytes(ctx, path, name)

    def _manifest(self, path: Path) -> dict:
        file = path / MANIFEST
        try:
            manifest = json.loads(file.read_text())
            files = manifest["files"]
            if not all(isinstance(e["size"], int) and isinstance(e["sha256"], str) for e in files.values()):
                raise ValueError("bad file entry")
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as e:
            raise CorruptCheckpoint(f"{file}: unreadable manifest ({type(e).__name__}: {e})") from None
        return manifest

    def _bytes(self, ctx: RankContext, path: Path, name: str) -> Optional[bytes]:
        file = path / name
        entry = self._manifest(path)["files"].get(name)
        if entry is None:
            raise CorruptCheckpoint(f"{file}: not listed in {MANIFEST}")
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise CorruptCheckpoint(f"{file}: missing") from None
        digest = hashlib.sha256(data).hexdigest()
        if (len(data), digest) != (entry["size"], entry["sha256"]):
            raise CorruptCheckpoint(
                f"{file}: {len(data)} bytes, sha256 {digest[:12]}; "
                f"manifest says {entry['size']} bytes, sha256 {entry['sha256'][:12]}"
            )
        return data


class LatestBeforeShards(_Checkpointer):
    """Publishes `latest` -> step_N before any shard of step_N is written.

    Flagged as not **atomic**: a crash between the pointer and the last shard
    leaves `latest` naming an incomplete checkpoint (files missing or torn),
    so the resume fails although the previous checkpoint is intact on disk.
    """

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(ctx.ckpt_dir, step)
        self._make_dir(ctx, path)
        if ctx.rank == 0:
            atomic_write_text(Path(ctx.ckpt_dir) / LATEST, path.name + "\n")  # the pointer first...
        dist.barrier()
        self._write_files(ctx, path, step)  # ...then the shards it vouches for
        dist.barrier()
        if ctx.rank == 0:
            self._rotate(ctx, step)
        dist.barrier()

    def _discover(self, ctx: RankContext) -> Optional[tuple[int, Path]]:
        return read_latest(ctx.ckpt_dir)


class RenameWithoutFsync(ReferenceCheckpointer):
    """The reference's tmp dir, manifest and rename, without a single fsync.

    Flagged as not **durable**: only power loss reveals it. After a save
    returned, a machine crash may lose the rename, the manifest or the file
    data, and the resume comes back older (or fresh) or refuses a checkpoint
    the job had reported as saved.
    """

    durable = False


class InPlaceOverwrite(_Checkpointer):
    """Rewrites one fixed directory `current/` in place, then `meta.json` with the step.

    Flagged as not **atomic** (and not preserving): a crash in the middle of
    save k leaves shards of save k next to shards of save k-1 under the old
    meta, and the resume loads that mix without complaint.
    """

    checks_extra = False

    def save(self, ctx: RankContext, step: int) -> None:
        path = Path(ctx.ckpt_dir) / "current"
        self._make_dir(ctx, path)
        self._write_files(ctx, path, step)  # over the previous save's files, one by one
        dist.barrier()
        if ctx.rank == 0:
            atomic_write_text(path / "meta.json", json.dumps({"step": step}))
        dist.barrier()

    def _prepare(self, ctx: RankContext, path: Path) -> None:
        path.mkdir(parents=True, exist_ok=True)
        self._sync_dir(path.parent)

    def _discover(self, ctx: RankContext) -> Optional[tuple[int, Path]]:
        meta = Path(ctx.ckpt_dir) / "current" / "meta.json"
        if not meta.exists():
            return None
        return int(json.loads(meta.read_text())["step"]), meta.parent


class DeletesPreviousFirst(ReferenceCheckpointer):
    """The reference, except that it makes room first: every `step_N` is
    removed before the new checkpoint is written and committed.

    Flagged as not **preserving**: a save that fails (crash, ENOSPC, an error
    on one rank) leaves no checkpoint at all, and the resume silently starts
    training from scratch.
    """

    def _prepare(self, ctx: RankContext, path: Path) -> None:
        super()._prepare(ctx, path)
        for _, previous in step_dirs(ctx.ckpt_dir):
            shutil.rmtree(previous)


class SkipsMissingFile(ReferenceCheckpointer):
    """The reference, except that a file missing from a committed checkpoint
    counts as "optional": discovery accepts the checkpoint and load keeps the
    live value of whatever part (optimizer, RNG, data position) it lacks.

    Flagged as not **detecting** (a deleted file is not refused) and not
    **faithful** (the silent partial resume differs in optim/ or rng/ keys).
    """

    def _bytes(self, ctx: RankContext, path: Path, name: str) -> Optional[bytes]:
        if not (path / name).exists():
            return None
        return super()._bytes(ctx, path, name)


class Rank0OnlyBarrier(ReferenceCheckpointer):
    """The reference, with one extra `dist.barrier()` that only rank 0 enters
    in every save (after its files, while the others go on to all-gather).

    Flagged as not **live**: with two ranks or more the first save never
    returns (rank 0 waits in barrier, its peers in all_gather_object).
    """

    def _write_files(self, ctx: RankContext, path: Path, step: int) -> dict[str, dict]:
        written = super()._write_files(ctx, path, step)
        if ctx.rank == 0:
            dist.barrier()
        return written


class LoadErrorBlocksPeers(ReferenceCheckpointer):
    """Trusts the newest `step_N` and lets each rank verify only the files it
    reads; a rank that finds one missing or corrupt raises, while its peers
    wait in the "all loaded" barrier for it forever.

    Flagged as not **live** (a failure on one rank must fail all) and not
    **detecting** (the refusal is not raised on every rank): a damaged rank
    file of rank r turns into a hang instead of a clear error.
    """

    def load(self, ctx: RankContext) -> Optional[int]:
        step = self._load(ctx)
        dist.barrier()
        return step

    def _discover(self, ctx: RankContext) -> Optional[tuple[int, Path]]:
        committed = step_dirs(ctx.ckpt_dir)
        return committed[-1] if committed else None


class MmapWrites(ReferenceCheckpointer):
    """The reference, plus a file each save writes through `mmap` into its
    committed directory (as memory-mapped savers do).

    Not a checkpoint bug: the loader never reads it. What must show is the
    harness's own blind spot: the probes see no write to `raw.bin`, so the
    exploration warns that faults and power loss never touched it.
    """

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if ctx.rank == 0:
            payload = b"written past the probes"
            fd = os.open(step_dir(ctx.ckpt_dir, step) / "raw.bin", os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.ftruncate(fd, len(payload))
                with mmap.mmap(fd, len(payload)) as mapped:
                    mapped[:] = payload
            finally:
                os.close(fd)
        dist.barrier()


class WritesInChildProcess(ReferenceCheckpointer):
    """The reference, plus a file rank 0 has a child process write into each
    committed directory and then fsyncs itself (as DCP's process-based async
    executor does with its checkpoint process). Not a checkpoint bug: the
    loader never reads it. The power-loss model sees an fsync of a file it
    never saw written and cannot say what a power loss leaves: those cases
    are UNKNOWN, never a harness ERROR, and never a FAIL."""

    def save(self, ctx: RankContext, step: int) -> None:
        super().save(ctx, step)
        if ctx.rank == 0:
            side = step_dir(ctx.ckpt_dir, step) / "side.bin"
            subprocess.run([sys.executable, "-c", f"open({str(side)!r}, 'wb').write(b'from a child')"], check=True)
            fd = os.open(side, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        dist.barrier()


# -- buffering bugs: what the probes hid while they made every file unbuffered ----------
class FsyncBeforeFlush(ReferenceCheckpointer):
    """The reference, except that the manifest is fsynced while `json.dump`'s
    bytes are still in the file's Python buffer: `os.fsync(f.fileno())` with
    no `f.flush()` first, as torch 2.13's DCP does for `.metadata`
    (`_FileSystemWriter.finish`: `pickle.dump` into `Path.open("wb")`, then
    `os.fsync`). The bytes reach the kernel only at `close()`, after the
    fsync, and are renamed into place (the tmp dir's rename, then a `ckpt_dir`
    fsync) without ever being synced.

    Flagged as not **durable**: a power loss right after the save returned
    keeps `step_N/` with an empty manifest, so the resume falls back to the
    previous checkpoint although the job had reported step N saved.
    """

    #: False: the bug; True: `FlushThenFsync`.
    flushes_manifest = False

    def _sync_file(self, f: Any) -> None:
        if Path(f.name).name == MANIFEST and not self.flushes_manifest:
            os.fsync(f.fileno())  # syncs what the kernel has: not the manifest, still in f's buffer
        else:
            super()._sync_file(f)


class FlushThenFsync(FsyncBeforeFlush):
    """`FsyncBeforeFlush` with the `f.flush()` before the manifest's fsync (the
    fix for DCP's `.metadata`): must pass **durable**, so that what flags its
    twin is the missing flush, not the manifest's buffering or its rename."""

    flushes_manifest = True


class CloseBeforePointer(_Checkpointer):
    """Step directories and a `latest` pointer, each file streamed out in
    4 KiB pieces (as a serializer that writes as it goes does), so that the
    last piece of each waits in the file's Python buffer until it is flushed.
    Every file is flushed, fsynced and closed, the step dir fsynced, and only
    then, after a barrier, rank 0 commits `latest` (written, flushed, fsynced,
    renamed, `ckpt_dir` fsynced). Correct: must pass **atomic** at every crash.
    """

    #: False: `PointerBeforeClose`.
    closes_before_pointer = True
    #: False: no barrier after the commit (`CloseBeforePointerUnfenced`).
    fenced = True
    CHUNK = 4096

    def save(self, ctx: RankContext, step: int) -> None:
        path = step_dir(ctx.ckpt_dir, step)
        self._make_dir(ctx, path)
        files = self._stream_files(ctx, path, step)
        try:
            if self.closes_before_pointer:
                self._close(files)
            self._sync_dir(path)
            dist.barrier()
            if ctx.rank == 0:
                atomic_write_text(Path(ctx.ckpt_dir) / LATEST, path.name + "\n")
                self._rotate(ctx, step)
        finally:
            self._close(files)
        if self.fenced:
            dist.barrier()

    def _stream_files(self, ctx: RankContext, path: Path, step: int) -> list[Any]:
        """This rank's files, written and left open."""
        parts = {rank_file(ctx.rank): self._extra(ctx, step)}
        if ctx.rank == 0:
            parts = {name: obj.state_dict() for name, obj in self._targets().items()} | parts
        files = []
        for name, obj in parts.items():
            buffer = BytesIO()
            torch.save(obj, buffer)
            data = memoryview(buffer.getvalue())
            files.append(open(path / name, "wb"))
            for begin in range(0, len(data), self.CHUNK):
                files[-1].write(data[begin:begin + self.CHUNK])
        return files

    def _close(self, files: list[Any]) -> None:
        for f in files:
            if not f.closed:
                self._sync_file(f)
                f.close()

    def _discover(self, ctx: RankContext) -> Optional[tuple[int, Path]]:
        return read_latest(ctx.ckpt_dir)


class PointerBeforeClose(CloseBeforePointer):
    """`CloseBeforePointer` with its files still open when `latest` is
    committed (the pointer is written inside the `with open(...)` block, or
    the files are closed by a writer's `finally`): the pointer itself is
    committed correctly, but the last piece of each data file is still in the
    process's buffer and reaches the kernel only at the close after it.

    Flagged as not **atomic**: a crash between the pointer's rename and the
    close leaves `latest` naming files whose tails were never written, and
    the resume refuses (or crashes on) a checkpoint that was committed. The
    old probes, which made every file unbuffered, wrote each piece through at
    once and passed this bug.
    """

    closes_before_pointer = False


class CloseBeforePointerUnfenced(CloseBeforePointer):
    """`CloseBeforePointer` without the barrier after the commit: the peers
    return from the save while rank 0 still commits. Correct all the same
    (a save counts once it returned on every rank). A crash of rank 0 in the
    commit is one no peer notices, so exploration derives the state it leaves
    from the golden trace instead of running it (`cases._derived_crash`)."""

    fenced = False


class PointerBeforeCloseUnfenced(PointerBeforeClose):
    """`PointerBeforeClose` without the barrier after the commit: flagged as
    not **atomic** by crashes of rank 0 between the pointer and the close,
    states exploration derives from the golden trace."""

    fenced = False
