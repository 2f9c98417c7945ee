"""File-operation probes under the checkpoint directory.

Wrapped: `open`/`io.open` for writing (so `pathlib` too) and each write,
`os.fsync`/`os.fdatasync`, `os.rename`/`os.replace` (so `Path.rename` and
`Path.replace`), `os.unlink`/`os.remove`, `os.mkdir` (so `os.makedirs` and
`Path.mkdir`), `os.rmdir`, `shutil.rmtree`, and the savers that write from
native code — `torch.save` to a path and `safetensors.torch.save_file` — which
are routed through a Python file object so every byte is seen, can be torn,
and can be tracked for durability.

In a rank with faults armed, files opened for writing under the checkpoint
directory are unbuffered, so a write the job made is in the kernel when the
next operation starts and a crash point means exactly what it names; other
ranks keep the job's own buffering. Everything outside the checkpoint
directory, and every read, takes the original path untouched.
`shutil.copyfile` copies through the probed file object, not `os.sendfile`.
Not seen: `os.write` on raw descriptors and `mmap` (an exploration warns
about files holding bytes no probe saw: `trace.unseen_writes`).
"""

from __future__ import annotations

import builtins
import functools
import io
import itertools
import os
import shutil
from typing import Any, Callable, Optional

from ckpt_harness.inject.faults import Fault, Injector, die
from ckpt_harness.inject.probes import Tracer

_WRITE_MODES = frozenset("wax+")


class _Files:
    def __init__(self, tracer: Tracer, root: str, data_log: Optional[str]):
        self.tracer = tracer
        self.root = os.path.abspath(root)
        self.real_root = os.path.realpath(root)
        self.fids = itertools.count()
        self.by_fd: dict[int, tuple[Optional[str], str]] = {}  # fd -> (fid, relpath); fid None: a directory
        self.data_fd = os.open(data_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644) if data_log else None
        self.data_size = 0

    def rel(self, path: Any) -> Optional[str]:
        """`path` relative to the checkpoint directory, or None if outside it."""
        if isinstance(path, int):
            return None
        try:
            absolute = os.path.abspath(os.fsdecode(os.fspath(path)))
        except TypeError:
            return None
        for root in (self.root, self.real_root):
            if absolute == root or absolute.startswith(root + os.sep):
                return os.path.relpath(absolute, root)
        return None

    def exact(self) -> bool:
        """Whether writes must reach the kernel and the trace one by one: in a
        rank with faults armed (a crash point must mean what it says) or
        whose bytes the durability model will replay. Other ranks keep the
        job's own buffering, as a real process would."""
        return self.data_fd is not None or bool(self.tracer.injector.pending)

    def log_data(self, data: memoryview) -> Optional[list[int]]:
        if self.data_fd is None:
            return None
        offset = self.data_size
        os.write(self.data_fd, data)
        self.data_size += len(data)
        return [offset, len(data)]


class ProbedFile:
    """A write-mode file under the checkpoint directory: each write is a point."""

    def __init__(self, raw: Any, files: _Files, fid: str, rel: str):
        self._raw = raw
        self._files = files
        self._fid = fid
        self._rel = rel
        self._exact = files.exact()
        self._pos = raw.tell()
        files.by_fd[raw.fileno()] = (fid, rel)

    def write(self, data: Any) -> int:
        if not self._exact:  # the fast path: count the point, extend the run
            n = len(data) if type(data) is bytes else memoryview(data).nbytes
            self._files.tracer.record_write(
                {"fid": self._fid, "path": self._rel, "offset": self._pos, "n": n, "data": None}, batch=True
            )
            self._raw.write(data)
            self._pos += n
            return n
        view = memoryview(data).cast("B")
        n = len(view)
        tracer, files = self._files.tracer, self._files
        with tracer.lock:
            index = tracer.injector.point(tracer.phase)
            fault = tracer.injector.armed(tracer.phase, index, "write")
        lands = n // 2 if fault is not None and fault.kind in ("crash-mid", "torn") else n
        tracer.record_write(
            {"point": index, "fid": self._fid, "path": self._rel, "offset": self._pos, "n": lands,
             "data": files.log_data(view[:lands])},
            batch=False,
        )
        if fault is not None and fault.kind not in ("crash-mid", "torn", "crash-after"):
            Injector.before(fault, "write", self._rel)
        self._write_all(view[:lands])
        self._pos += lands
        if fault is not None and fault.kind in ("crash-mid", "crash-after"):
            die()
        return n

    def seek(self, *args: Any) -> int:
        position = self._raw.seek(*args)
        self._pos = position
        return position

    def _write_all(self, view: memoryview) -> None:
        while view:
            written = self._raw.write(view)
            view = view[written:]

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def close(self) -> None:
        if not self._raw.closed:
            self._files.by_fd.pop(self._raw.fileno(), None)
            self._files.tracer.emit("close", fid=self._fid, path=self._rel)
        self._raw.close()

    def flush(self) -> None:
        self._raw.flush()

    # io protocol: what TextIOWrapper, torch.save and zipfile ask of a file
    def writable(self) -> bool:
        return True

    def readable(self) -> bool:
        return self._raw.readable()

    def seekable(self) -> bool:
        return self._raw.seekable()

    @property
    def closed(self) -> bool:
        return self._raw.closed

    @property
    def name(self) -> Any:
        return self._raw.name

    @property
    def mode(self) -> str:
        return self._raw.mode

    def __getattr__(self, name: str) -> Any:  # fileno, tell, seek, read, truncate, ...
        return getattr(self._raw, name)

    def __enter__(self) -> "ProbedFile":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass


def install(tracer: Tracer, ckpt_dir: str, data_log: Optional[str]) -> None:
    files = _Files(tracer, ckpt_dir, data_log)
    original_open = io.open

    @functools.wraps(original_open)
    def probed_open(file: Any, mode: str = "r", buffering: int = -1, encoding: Any = None,
                    errors: Any = None, newline: Any = None, closefd: bool = True, opener: Any = None) -> Any:
        if _WRITE_MODES.isdisjoint(mode) or tracer.nested():
            return original_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        rel = files.rel(file)
        if rel is None:
            return original_open(file, mode, buffering, encoding, errors, newline, closefd, opener)
        fid = f"r{tracer.rank}f{next(files.fids)}"
        raw_mode = mode.replace("b", "").replace("t", "") + "b"

        def run(fault: Optional[Fault]) -> Any:
            raw = original_open(file, raw_mode, 0 if files.exact() else buffering, None, None, None, closefd, opener)
            probed = ProbedFile(raw, files, fid, rel)
            if "b" in mode:
                return probed
            return io.TextIOWrapper(probed, encoding=encoding, errors=errors, newline=newline, write_through=True)

        return tracer.operation(
            "open", rel, run, path=rel, fid=fid, mode=mode,
            trunc="w" in mode, create="r" not in mode, append="a" in mode,
        )

    builtins.open = io.open = probed_open

    def path_op(op: str, original: Callable, *, argnames: tuple[str, ...]) -> Callable:
        @functools.wraps(original)
        def probe(*args: Any, **kwargs: Any) -> Any:
            if tracer.nested() or kwargs.get("dir_fd") is not None or kwargs.get("src_dir_fd") is not None:
                return original(*args, **kwargs)
            rels = [files.rel(a) for a in args[: len(argnames)]]
            if all(r is None for r in rels):
                return original(*args, **kwargs)
            fields = dict(zip(argnames, rels))
            what = " -> ".join(str(r) for r in rels)
            return tracer.operation(op, what, lambda fault: original(*args, **kwargs), **fields)

        return probe

    os.rename = path_op("rename", os.rename, argnames=("src", "dst"))
    os.replace = path_op("rename", os.replace, argnames=("src", "dst"))
    os.unlink = path_op("unlink", os.unlink, argnames=("path",))
    os.remove = path_op("unlink", os.remove, argnames=("path",))
    os.mkdir = path_op("mkdir", os.mkdir, argnames=("path",))
    os.rmdir = path_op("rmdir", os.rmdir, argnames=("path",))
    rmtree = path_op("rmtree", shutil.rmtree, argnames=("path",))
    rmtree.avoids_symlink_attacks = shutil.rmtree.avoids_symlink_attacks  # type: ignore[attr-defined]
    shutil.rmtree = rmtree
    # shutil.copyfile's Linux fast path copies descriptor to descriptor with
    # os.sendfile, past the probed file object (DeepSpeed copies its
    # zero_to_fp32.py into every checkpoint so); off, it copies through write().
    shutil._USE_CP_SENDFILE = False  # type: ignore[attr-defined]

    original_os_open, original_close = os.open, os.close

    @functools.wraps(original_os_open)
    def probed_os_open(path: Any, flags: int, mode: int = 0o777, *, dir_fd: Any = None) -> int:
        fd = original_os_open(path, flags, mode, dir_fd=dir_fd)
        rel = files.rel(path) if dir_fd is None else None
        if rel is not None and os.path.isdir(path):
            files.by_fd[fd] = (None, rel)  # a directory opened to be fsynced
        return fd

    @functools.wraps(original_close)
    def probed_close(fd: int) -> None:
        files.by_fd.pop(fd, None)
        original_close(fd)

    os.open, os.close = probed_os_open, probed_close

    def sync_op(original: Callable) -> Callable:
        @functools.wraps(original)
        def probe(fd: Any) -> None:
            number = fd if isinstance(fd, int) else fd.fileno()
            known = files.by_fd.get(number)
            if known is None or tracer.nested():
                return original(fd)
            fid, rel = known
            return tracer.operation("fsync", rel, lambda fault: original(fd), path=rel, fid=fid, is_dir=fid is None)

        return probe

    os.fsync = sync_op(os.fsync)
    os.fdatasync = sync_op(os.fdatasync)
    _route_native_savers(files)


def _route_native_savers(files: _Files) -> None:
    """torch.save(obj, "path") writes from C++; give it a probed file object."""
    import sys

    import torch
    import torch.serialization

    original_save = torch.serialization.save

    @functools.wraps(original_save)
    def save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(f, (str, os.PathLike)) and files.rel(f) is not None:
            with open(f, "wb") as handle:
                return original_save(obj, handle, *args, **kwargs)
        return original_save(obj, f, *args, **kwargs)

    torch.save = torch.serialization.save = save

    st = sys.modules.get("safetensors.torch")
    if st is not None:
        original_save_file = st.save_file

        @functools.wraps(original_save_file)
        def save_file(tensors: Any, filename: Any, metadata: Any = None) -> None:
            if files.rel(filename) is None:
                return original_save_file(tensors, filename, metadata)
            with open(filename, "wb") as handle:
                handle.write(st.save(tensors, metadata=metadata))

        _rebind(original_save_file, save_file)


def _rebind(original: Any, replacement: Any) -> None:
    """Replace `original` wherever an imported module holds it: frameworks
    bind savers at import time (`from safetensors.torch import save_file as
    safe_save_file` in transformers and accelerate), in the warm parent,
    before any rank installs probes."""
    import sys

    for module in list(sys.modules.values()):
        namespace = getattr(module, "__dict__", None)
        if not isinstance(namespace, dict):
            continue
        for name, value in list(namespace.items()):
            if value is original:
                namespace[name] = replacement
